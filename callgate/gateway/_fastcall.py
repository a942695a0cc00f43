"""The lean path of a ``tools/call`` from a stdio client: read once, guard, forward, answer once.

The SDK's server parses every line into models, hands each message through memory streams and a
task per request, validates the request twice, wraps the result in models and dumps them again: on
the demo upstream that was most of the 2 ms of CPU the hop cost. ``FastCalls`` takes a
``tools/call`` line before the SDK sees it, when it is plainly acceptable:

- it parses as JSON with no duplicate key (a line with duplicates, or one carrying
  ``RAW_ARGUMENTS_KEY``, goes to the SDK through ``_json.rewrite`` as before);
- the connection's era is settled (the SDK decides it on the client's first request, which this
  path never takes): a handshake-era connection once ``initialize`` was answered and
  ``notifications/initialized`` sent; a 2026-07-28 request whose envelope passes the SDK's own
  ladder (``classify_inbound_request``);
- the params pass the SDK's per-revision check of the request (``validate_client_request``);
- the call is not the retry of an approval question (``requestState``), and the human would not
  be asked over the back-channel (handshake era, elicitation declared, in-band approval on).

Everything else (initialize, listings, notifications, resources, malformed requests) is the SDK's,
and so is every answer a line this path did not take gets. The answer is the one the SDK would
write: the result shaped by the revision's own serializer (``serialize_server_result``), the
verdict in ``_meta``, ``resultType`` and the ``serverInfo`` stamp on a 2026-07-28 request. Each
call runs in its own task (a call waits on the upstream; the next line must still be read), which
``notifications/cancelled`` cancels, unanswered, as the SDK does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from mcp.server import Server
from mcp.server.connection import allowed_log_levels
from mcp.shared.inbound import InboundModernRoute, classify_inbound_request
from mcp_types import INTERNAL_ERROR
from mcp_types import methods as _methods
from opentelemetry import context as otel_context
from pydantic import ValidationError

from callgate.gateway._json import RAW_ARGUMENTS_KEY
from callgate.gateway.gateway import Gateway
from callgate.gateway.proxy import relaying_to
from callgate.gateway.results import caller_context, guard_answer, passed_answer, trace_id_now
from callgate.gateway.server import input_required
from callgate.gateway.sessions import session_from_meta
from guard import ToolResult

__all__ = ["FastCalls", "Lines"]

log = logging.getLogger("callgate.gateway")

_SERVER_INFO = types.SERVER_INFO_META_KEY
_HINTED = (
    b'"tools/call"',
    b'"initialize"',
    b"notifications/initialized",
    b"notifications/cancelled",
)


class Lines:
    """Where answers go: the stdio server's output pipe, one whole line per write."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    async def send(self, message: dict[str, Any]) -> None:
        try:
            data = orjson.dumps(message)
        except TypeError:  # an integer past 64 bits, which orjson does not write
            data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        self._writer.write(data + b"\n")
        await self._writer.drain()


class _Duplicate(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    built = dict(pairs)
    if len(built) != len(pairs):
        raise _Duplicate
    return built


@dataclass(frozen=True, slots=True)
class _Era:
    """What the SDK knows about the connection that an answer depends on."""

    version: str
    capabilities: dict[str, Any]
    modern: bool


class FastCalls:
    """The lean ``tools/call`` path of one stdio connection (see the module's doc)."""

    def __init__(
        self,
        gateway: Gateway,
        server: Server[Any],
        *,
        principal: str,
        transport_session: str,
        lines: Lines,
    ) -> None:
        self.gateway = gateway
        self.principal = principal
        self.transport_session = transport_session
        self.lines = lines
        self.taken = 0
        """How many calls this path answered (the rest went to the SDK)."""
        self._server = server
        self._opened = False  # the SDK decides the era on the first request: it gets that one
        self._modern = False
        self._init_id: Any = None
        self._answered_version: str | None = None
        self._handshake: _Era | None = None
        self._capabilities: dict[str, Any] = {}
        self._running: dict[Any, asyncio.Task[None]] = {}
        """The calls being answered, by request id (plain asyncio tasks: an anyio task group's
        spawn cost more than the rest of the path's bookkeeping together)."""
        # Cache hints would change a tools/call answer; the SDK applies them, so it keeps those.
        self._enabled = "tools/call" not in server.cache_hints

    # -- reading ----------------------------------------------------------------------------------

    def offer(self, line: bytes) -> bool:
        """Whether this path took ``line`` (a ``tools/call`` it answers); False: the SDK's."""
        if not self._enabled or not any(hint in line for hint in _HINTED):
            self._open(line)
            return False
        if RAW_ARGUMENTS_KEY.encode() in line:
            return False
        try:
            message = json.loads(line, object_pairs_hook=_unique)
        except ValueError:  # not JSON, or duplicate keys: the SDK's answer (through _json.rewrite)
            return False
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return False
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params")
        if method == "notifications/cancelled" and isinstance(params, dict):
            task = self._running.get(params.get("requestId"))
            if task is None:
                return False
            task.cancel()
            return True
        if method == "notifications/initialized" and self._answered_version is not None:
            self._handshake = _Era(self._answered_version, self._capabilities, modern=False)
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return False
        if method == "initialize":
            self._note_initialize(request_id, params)
        if not self._opened:
            self._open(line)
            return False
        if method != "tools/call" or not isinstance(params, dict) or request_id in self._running:
            return False
        era = self._era(message)
        if era is None or not self._plain(params, era):
            return False
        self.taken += 1
        self._running[request_id] = asyncio.get_running_loop().create_task(
            self._serve(request_id, params, era)
        )
        return True

    async def aclose(self) -> None:
        """The client is gone: the calls still running are cancelled (nobody reads an answer)."""
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def _open(self, line: bytes) -> None:
        """The client's first request decides the era, as the SDK decides it (once)."""
        if self._opened or b'"method"' not in line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            return
        if isinstance(message, dict) and "id" in message and "method" in message:
            self._opened = True
            self._modern = message["method"] != "initialize" and isinstance(
                classify_inbound_request(message), InboundModernRoute
            )

    def _note_initialize(self, request_id: Any, params: Any) -> None:
        self._init_id, self._answered_version, self._handshake = request_id, None, None
        capabilities = params.get("capabilities") if isinstance(params, dict) else None
        self._capabilities = capabilities if isinstance(capabilities, dict) else {}

    def answered(self, text: str) -> None:
        """The SDK wrote ``text``: notes the negotiated version when it answers ``initialize``."""
        if self._init_id is None or '"protocolVersion"' not in text:
            return
        try:
            message = json.loads(text)
        except ValueError:
            return
        result = message.get("result") if isinstance(message, dict) else None
        if isinstance(result, dict) and message.get("id") == self._init_id:
            version = result.get("protocolVersion")
            self._answered_version = version if isinstance(version, str) else None
            self._init_id = None

    def _era(self, message: dict[str, Any]) -> _Era | None:
        if not self._modern:
            return self._handshake
        route = classify_inbound_request(message)
        if not isinstance(route, InboundModernRoute) or not isinstance(
            route.client_capabilities, dict
        ):
            return None
        return _Era(route.protocol_version, route.client_capabilities, modern=True)

    def _plain(self, params: dict[str, Any], era: _Era) -> bool:
        """A call this path answers as the SDK would (see the module's doc)."""
        if "requestState" in params or "inputResponses" in params or "task" in params:
            return False
        in_band = self.gateway.config.policy.in_band_approval
        if not era.modern and in_band and "elicitation" in era.capabilities:
            return False  # the human is asked over the back-channel: the SDK's session does that
        try:
            _methods.validate_client_request("tools/call", era.version, params)
        except (ValidationError, KeyError):
            return False
        name, arguments = params.get("name"), params.get("arguments")
        return isinstance(name, str) and (arguments is None or isinstance(arguments, dict))

    # -- answering --------------------------------------------------------------------------------

    async def _serve(self, request_id: Any, params: dict[str, Any], era: _Era) -> None:
        try:
            answer = await self._answer(request_id, params, era)
            await self.lines.send(answer)
        except Exception:
            log.exception("tools/call %r failed", params.get("name"))
            error = {"code": INTERNAL_ERROR, "message": "Internal error"}
            try:
                await self.lines.send({"jsonrpc": "2.0", "id": request_id, "error": error})
            except Exception:  # the client went away
                log.debug("the error answer was not written", exc_info=True)
        finally:
            self._running.pop(request_id, None)

    async def _answer(self, request_id: Any, params: dict[str, Any], era: _Era) -> dict[str, Any]:
        name: str = params["name"]
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else None
        session_id = session_from_meta(meta, self.principal, self.transport_session)
        caller = caller_context(meta)
        token = otel_context.attach(caller) if caller is not None else None
        try:
            relay = _LineRelay(self.lines, meta, era)
            with relaying_to(relay):
                result = await self.gateway.call(
                    self.principal,
                    session_id,
                    name,
                    params.get("arguments"),
                    call_id=str(request_id),
                )
            shown = self._shown(result, name, era, session_id)
            return {"jsonrpc": "2.0", "id": request_id, "result": shown}
        finally:
            if token is not None:
                otel_context.detach(token)

    def _shown(self, result: ToolResult, name: str, era: _Era, session_id: str) -> dict[str, Any]:
        gateway = self.gateway
        if (
            result.needs_human
            and result.approval_id is not None
            and gateway.config.policy.in_band_approval
            and "elicitation" in era.capabilities
            and (action := gateway.pending(result.approval_id)) is not None
        ):
            # Only a 2026-07-28 request gets here (see _plain): the question is its answer.
            asked = input_required(gateway, action, session_id, self.principal)
            return self._wire(asked.model_dump(by_alias=True, mode="json", exclude_none=True), era)
        trace_id = trace_id_now()
        passed = passed_answer(result, trace_id=trace_id)
        if passed is not None:
            try:  # isError as the SDK's CallToolResult model writes it: always
                return self._wire({"isError": False, **passed}, era)
            except ValidationError:  # a result stored in another shape (an older gateway)
                pass
        structured = not gateway.lists_output_schema(name)
        return self._wire(guard_answer(result, structured=structured, trace_id=trace_id), era)

    def _wire(self, result: dict[str, Any], era: _Era) -> dict[str, Any]:
        """``result`` shaped as the SDK's runner shapes a handler's (``ServerRunner._serialize``)."""
        # The SDK dumps a handler's CallToolResult model, whose resultType defaults to complete.
        result = {"resultType": "complete", **result}
        result_type = result["resultType"]
        if not era.modern or not isinstance(result_type, str) or result_type in _CORE:
            result = _methods.serialize_server_result("tools/call", era.version, result)
        if era.modern:
            meta = result.get("_meta")
            if meta is None:
                result["_meta"] = {_SERVER_INFO: self._server.server_info_stamp}
            elif isinstance(meta, dict) and meta.get(_SERVER_INFO) is None:
                result["_meta"] = {**meta, _SERVER_INFO: self._server.server_info_stamp}
        return result


_CORE = frozenset(types.CORE_RESULT_TYPES)


class _LineRelay:
    """Progress and log messages of an upstream call, written as the SDK's session writes them
    (a ``proxy.RelayTarget``)."""

    def __init__(self, lines: Lines, meta: dict[str, Any] | None, era: _Era) -> None:
        self._lines = lines
        self._token = (meta or {}).get("progressToken")
        self._levels = allowed_log_levels(era.version, meta)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if not isinstance(self._token, str | int):
            return  # the client asked for none
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._quietly(
            {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        )

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        if params.level not in self._levels:
            return
        sent = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        await self._quietly({"jsonrpc": "2.0", "method": "notifications/message", "params": sent})

    async def _quietly(self, message: dict[str, Any]) -> None:
        try:
            await self._lines.send(message)
        except Exception:  # a client that went away must not fail the upstream's call
            log.debug("notification not relayed", exc_info=True)
