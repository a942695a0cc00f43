"""One upstream MCP server: a client connection that lists tools, calls them, and comes back after a crash.

Each connection lives in its own task (the SDK's client is an async context manager, and anyio wants
a context entered and left by the same task). A call on a dead connection reconnects first, bounded by
``connect_timeout``; a reconnect lists the tools again, so a definition changed across a restart is
seen (and blocked by the pin check) before any call reaches it.

Failures are sorted for the guard's execute stage by what they say about the world:

- the connection could not be made, or closed before the request was sent: ``ConnectionError``
  (not applied, retried);
- the connection closed while the request was out: ``UpstreamLost``, a ``TimeoutError`` (the
  upstream may have acted; a write ends with outcome unknown unless the upstream is idempotent);
- the upstream answered with a JSON-RPC error: ``UpstreamRefused`` (a refusal, never retried), also
  for the codes -32000 and -32001 the SDK uses for its own closed-connection and timeout errors: the
  deadline is the gateway's own, and the connection's read side is watched (``_wire``);
- the connection had ended before the call (a crash between calls): the call reconnects first, so
  a write is never sent into a dead connection and called "outcome unknown".

On a stdio connection a ``tools/call`` takes the lean path (``_stdio.RawCalls``): the request is one
JSON line with the session's per-request ``_meta``, the answer is parsed once and checked once
against the negotiated revision's result shape (the SDK checked it twice and built models both
times), and the caller gets the result as wire JSON. Over HTTP the SDK's session sends it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, nullcontext
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client._transport import TransportStreams
from mcp.client.session import _clamp_inbound_ttl, _later_revision_fields
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import methods as _methods

from callgate.gateway._stdio import (
    NotSent,
    RawCalls,
    RawRefused,
    TooLarge,
    bounded_stdio_client,
    too_large,
)
from callgate.gateway._wire import watched
from callgate.gateway.config import UpstreamConfig
from callgate.gateway.proxy import Relays

__all__ = ["TooLarge", "Upstream", "UpstreamLost", "UpstreamRefused", "inherited"]

log = logging.getLogger("callgate.gateway")


class UpstreamLost(TimeoutError):
    """The connection closed while a request was out: the upstream may or may not have acted."""


class UpstreamRefused(Exception):
    """The upstream answered the request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Upstream:
    """A live connection to one upstream server, restarted on demand."""

    def __init__(
        self,
        config: UpstreamConfig,
        *,
        on_tools: Callable[[Upstream, list[types.Tool]], Awaitable[None]] | None = None,
    ) -> None:
        self.config = config
        self.name = config.name
        self.tools: list[types.Tool] = []
        """The latest listing."""
        self._on_tools = on_tools
        self._client: Client | None = None
        self._raw: RawCalls | None = None
        """The live connection's lean ``tools/call`` path (stdio only)."""
        self._stop: anyio.Event | None = None
        self._reconnected: anyio.Event | None = None
        self._failure: str | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._ended: anyio.Event | None = None
        """Set when the current connection's read side has ended."""
        self.connects = 0
        """How many times a connection was made (1 after start; more after crashes)."""
        self.relays = Relays(self.name)
        """Progress and log messages to the client requests with a call in flight here (proxy)."""

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Connect and list the tools; raises ``ConnectionError`` if the upstream cannot be reached."""
        self._group = group
        await self._ensure()

    async def stop(self) -> None:
        """Close the connection (its task ends, a stdio server process is stopped)."""
        if self._stop is not None:
            self._stop.set()
        self._client = None

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        timeout: float | None,
        *,
        connected: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        """Call ``name``; its result as wire JSON. Reconnects first if the connection died.

        ``connected`` runs once the connection is live, before the request goes out: the place to
        refuse a tool whose definition a reconnect just found changed.
        """
        client = await self._ensure()
        if self._ended is not None and self._ended.is_set():
            # The connection ended since (a crash between calls): nothing sent yet, so reconnect
            # rather than send into it and call a write that never arrived "outcome unknown".
            self._lost(client)
            client = await self._ensure()
        ended, raw = self._ended, self._raw
        if connected is not None:
            connected()
        try:
            # The deadline is ours, not the SDK's: its REQUEST_TIMEOUT code is also an error an
            # upstream may answer with, which is a refusal, not a timeout.
            with (
                anyio.fail_after(timeout) if timeout is not None else nullcontext(),
                self.relays.during() as progress,
            ):
                if raw is not None:
                    result = await _raw_call(client, raw, name, arguments, progress)
                else:
                    # The session's request, not ``Client.call_tool``: that one also validates
                    # ``structuredContent`` against the tool's outputSchema (a JSON Schema pass
                    # per call), which the downstream client does itself on the result.
                    typed = await client.session.send_request(
                        types.CallToolRequest(
                            params=types.CallToolRequestParams(name=name, arguments=arguments)
                        ),
                        types.CallToolResult,
                        progress_callback=progress,
                    )
                    result = typed.model_dump(mode="json", by_alias=True, exclude_unset=True)
                self._links(result)
                return result
        except TimeoutError:
            raise TimeoutError(f"{self.name} did not answer {name} in time") from None
        except MCPError as err:
            if (limit := too_large(err)) is not None:
                raise TooLarge(limit) from None
            if err.code == types.CONNECTION_CLOSED and await self._closed(ended, err):
                self._lost(client)
                raise UpstreamLost(f"{self.name} closed the connection during {name}") from err
            if not self._alive(client):
                raise UpstreamLost(f"{self.name} closed the connection during {name}") from err
            raise UpstreamRefused(err.code, err.message) from err
        except RawRefused as err:  # the upstream's own answer: the connection is fine
            raise UpstreamRefused(err.code, err.message) from err
        except NotSent as err:  # the connection ended before the line was written
            self._lost(client)
            raise ConnectionError(f"{self.name} cannot be reached: {err}") from err
        except httpx2.ConnectError as err:  # the request never left: nothing happened
            self._lost(client)
            raise ConnectionError(f"{self.name} cannot be reached: {err}") from err
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            anyio.EndOfStream,
            EOFError,
            OSError,
            httpx2.TransportError,
        ) as err:
            self._lost(client)
            raise UpstreamLost(f"{self.name} closed the connection during {name}") from err

    def _links(self, result: dict[str, Any]) -> None:
        """Resource links in a result become readable through this upstream (``Relays``)."""
        content = result.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "resource_link" for block in content
        ):
            self.relays.returned(types.CallToolResult.model_validate(result))

    async def _closed(self, ended: anyio.Event | None, err: MCPError) -> bool:
        """Whether a CONNECTION_CLOSED error means the connection ended (else the upstream sent it).

        The SDK raises it when the read side ends; a write failing on a closed pipe ends the read
        side a moment later, so a short, bounded wait settles it."""
        if ended is None or ended.is_set():
            return True
        if err.message != "Connection closed":
            return False
        with anyio.move_on_after(0.5):
            await ended.wait()
        return ended.is_set()

    async def client(self) -> Client:
        """The live client (reconnecting if needed), for what is proxied besides tools."""
        return await self._ensure()

    async def relist(self) -> list[types.Tool]:
        """List the tools again (after a ``tools/list_changed`` notification, say)."""
        client = await self._ensure()
        return await self._list(client)

    # -- the connection ---------------------------------------------------------------------------

    async def _ensure(self) -> Client:
        """The live client, reconnecting if needed.

        The reconnect runs in its own task, so a caller cancelled at its tool's timeout (a slow
        process start on a loaded machine) does not cancel it: the next call finds it connected.
        """
        client = self._client
        if client is not None:
            return client
        assert self._group is not None, "start() first"
        if self._reconnected is None:
            self._reconnected = anyio.Event()
            self._group.start_soon(self._reconnect, self._reconnected)
        await self._reconnected.wait()
        if self._client is None:
            raise ConnectionError(self._failure or f"{self.name}: cannot connect")
        return self._client

    async def _reconnect(self, done: anyio.Event) -> None:
        try:
            with anyio.fail_after(self.config.connect_timeout):
                client = await self._connect()
                await self._list(client)
                await self.relays.subscriptions.renew(client)  # before any call goes out
            self._client, self._failure = client, None
        except TimeoutError:
            self._failure = f"{self.name}: no answer within {self.config.connect_timeout:g} s"
            await self.stop()
        except Exception as err:  # _connect's ConnectionError already names the upstream
            self._failure = (
                str(err)
                if isinstance(err, ConnectionError)
                else f"{self.name}: cannot connect: {err}"
            )
            log.warning("upstream %s: %s", self.name, self._failure)
            await self.stop()
        finally:
            self._reconnected = None
            done.set()

    async def _connect(self) -> Client:
        assert self._group is not None, "start() first"
        stop = anyio.Event()
        ready: list[Client | BaseException] = []
        raw: list[RawCalls | None] = []
        started = anyio.Event()
        ended = anyio.Event()
        self._stop = stop

        async def run() -> None:
            try:
                async with AsyncExitStack() as stack:
                    target, calls = await self._target(stack)
                    raw.append(calls)
                    transport = watched(target, ended)
                    client = await stack.enter_async_context(
                        Client(
                            transport,
                            message_handler=self._notified,
                            logging_callback=self.relays.logged,
                            log_level="debug",  # every level: each client's own opt-in decides
                            mode=self.config.protocol,
                        )
                    )
                    ready.append(client)
                    started.set()
                    await stop.wait()
            except BaseException as err:  # a crashed upstream ends here; the next call reconnects
                if not started.is_set():
                    ready.append(err)
                    started.set()
                elif not isinstance(err, anyio.get_cancelled_exc_class()):
                    log.warning("upstream %s connection ended: %s", self.name, err)
                if isinstance(err, anyio.get_cancelled_exc_class()):
                    raise
            finally:
                if self._client is not None and ready and self._client is ready[0]:
                    self._client = None

        self._group.start_soon(run)
        await started.wait()
        outcome = ready[0]
        if isinstance(outcome, BaseException):
            raise ConnectionError(f"{self.name}: cannot connect: {outcome}") from outcome
        self.connects += 1
        self._ended = ended
        self._raw = raw[0] if raw else None
        return outcome

    async def _target(
        self, stack: AsyncExitStack
    ) -> tuple[AbstractAsyncContextManager[TransportStreams], RawCalls | None]:
        """The transport, and its lean ``tools/call`` path when it has one (stdio)."""
        config = self.config
        if config.url is not None:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(config.headers), timeout=httpx2.Timeout(30, read=300)
                )
            )
            return streamable_http_client(
                config.url, http_client=http, max_sse_event_size=config.max_result_bytes + 65_536
            ), None
        assert config.command is not None
        command, *args = config.command
        if command in ("python", "python3"):
            command = sys.executable  # the gateway's own interpreter, venv included
        calls = RawCalls(on_log=self.relays.logged)
        return bounded_stdio_client(
            StdioServerParameters(
                command=command,
                args=args,
                env={**get_default_environment(), **inherited(), **config.env},
                cwd=config.cwd,
            ),
            max_line=config.max_result_bytes + _ENVELOPE,
            raw=calls,
        ), calls

    async def _list(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang startup
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools
        if self._on_tools is not None:
            await self._on_tools(self, tools)
        return tools

    async def _notified(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._group is not None:
            self._group.start_soon(self._relist_quietly)
        elif isinstance(message, types.ResourceUpdatedNotification):
            await self.relays.subscriptions.updated(str(message.params.uri))

    async def _relist_quietly(self) -> None:
        try:
            await self.relist()
        except Exception:
            log.warning(
                "upstream %s: listing tools after list_changed failed", self.name, exc_info=True
            )

    def _alive(self, client: Client) -> bool:
        return self._client is client

    def _lost(self, client: Client) -> None:
        if self._client is client:
            self._client = None
            if self._stop is not None:
                self._stop.set()


async def _raw_call(
    client: Client,
    raw: RawCalls,
    name: str,
    arguments: dict[str, Any],
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None,
) -> dict[str, Any]:
    """``tools/call`` on the lean path, checked as the SDK's session checks its answer."""
    session = client.session
    data: dict[str, Any] = {
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    session._stamp(data, {})  # the per-request _meta of a 2026-07-28 connection (headers: HTTP's)
    result = await raw.request("tools/call", data["params"], on_progress=progress)
    _clamp_inbound_ttl(result)
    version = session._negotiated_version or "2025-11-25"  # the SDK's own fallback
    try:
        _methods.validate_server_result("tools/call", version, result)  # ValidationError if not
    except KeyError:  # a revision the SDK has no result table for: the model checks it
        types.CallToolResult.model_validate(result)
    foreign = _later_revision_fields("tools/call", version)
    if not foreign.isdisjoint(result):
        result = {key: value for key, value in result.items() if key not in foreign}
    return result


_ENVELOPE = 4096
"""Bytes of a response line beyond its result (the JSON-RPC envelope) allowed over the limit."""


def inherited() -> dict[str, str]:
    """What a stdio upstream inherits besides the SDK's safe defaults: the Python path."""
    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV")}
