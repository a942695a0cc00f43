"""Resource subscriptions through the gateway, against a real SDK upstream that offers them: updates
reach only the client session that subscribed, under the principal's resources allowlist."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPError
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import telemetry
from callgate.gateway import Gateway, parse_config, running
from callgate.gateway.demo import gateway_command
from callgate.gateway.server import build_server
from tests.gateway.clients import started
from tests.gateway.conftest import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
store: {tmp}/gateway.db
telemetry: {{trail_dir: "{tmp}/spans"}}
policy: {{max_identical_calls: 1000, max_steps_per_session: 100000}}
upstreams:
  watched:
    command: [python, -m, tests.gateway.subscribe_upstream]
    protocol: legacy
    namespace: w
    timeout: 20
    connect_timeout: 30
principals:
  bot:
    tools: ["*"]
    resources: ["docs://*"]
  other:
    tools: ["*"]
    resources: ["docs://*"]
serve:
  stdio: {{principal: bot}}
"""

NOT_READABLE = ["secret://key", "SECRET://key", "docs:/a", "doc://a", "", "secret://docs://a"]
"""URIs outside ``docs://*``: listed by the upstream or not, each is not found for bot."""


class Updates:
    """The ``notifications/resources/updated`` one client received, with a wake-up per arrival."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self._arrived = anyio.Event()

    async def handler(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            self._arrived.set()

    async def until(self, count: int) -> list[str]:
        """The URIs once ``count`` have arrived (bounded: a missing update fails the test)."""
        with anyio.fail_after(20):
            while len(self.uris) < count:
                self._arrived = anyio.Event()
                await self._arrived.wait()
        return self.uris


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


@asynccontextmanager
async def gateway(tmp: Path) -> AsyncIterator[Gateway]:
    async with started(CONFIG.format(tmp=tmp), tmp) as gw:
        yield gw


@asynccontextmanager
async def client(
    gw: Gateway, updates: Updates | None = None, principal: str = "bot"
) -> AsyncIterator[Client]:
    """A handshake-era client in its own MCP session, all of them in one guard session."""
    server = build_server(gw, lambda ctx: (principal, "conv-1"))
    handler = updates.handler if updates is not None else None
    async with Client(server, mode="legacy", message_handler=handler) as connected:  # type: ignore[arg-type]
        yield connected


async def subscribe(c: Client, uri: str) -> None:
    # The session's request: ``Client.subscribe_resource`` warns that 2026-07-28 removed it.
    request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
    await c.session.send_request(request, types.EmptyResult)


async def unsubscribe(c: Client, uri: str) -> None:
    request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
    await c.session.send_request(request, types.EmptyResult)


async def said(c: Client, tool: str, **arguments: Any) -> str:
    result = await c.call_tool(tool, arguments)
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def at_upstream(c: Client) -> list[str]:
    """The URIs the upstream has a subscription for now."""
    found: list[str] = json.loads(await said(c, "w_subscriptions"))
    return found


class TestRouting:
    """An update goes to the sessions subscribed to its URI, and to no other."""

    def test_a_foreign_session_never_gets_another_sessions_updates(self, tmp_path: Path) -> None:
        """Two MCP sessions of one principal (one guard session even): each gets its own URI's."""
        mine, theirs = Updates(), Updates()

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw, mine) as a, client(gw, theirs) as b:
                await subscribe(a, "docs://a")
                await subscribe(b, "docs://b")
                assert await said(b, "w_touch", uri="docs://a") == "touched"
                assert await mine.until(1) == ["docs://a"]
                await said(a, "w_touch", uri="docs://b")
                assert await theirs.until(1) == ["docs://b"]
                await said(b, "w_touch", uri="docs://a")  # after theirs: mine's second comes last
                assert await mine.until(2) == ["docs://a", "docs://a"]
                assert theirs.uris == ["docs://b"]

        run(scenario)

    def test_a_uri_the_principal_may_not_read_is_not_found(self, tmp_path: Path) -> None:
        """Subscribing outside the allowlist answers exactly what reading it answers, and the
        upstream is never asked (a refusal must not confirm that a URI exists)."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw) as bot:
                for uri in NOT_READABLE:
                    with pytest.raises(MCPError) as read:
                        await bot.read_resource(uri)
                    with pytest.raises(MCPError) as subscribed:
                        await subscribe(bot, uri)
                    with pytest.raises(MCPError) as unsubscribed:
                        await unsubscribe(bot, uri)
                    for refused in (subscribed, unsubscribed):
                        assert (refused.value.code, refused.value.message) == (
                            read.value.code,
                            read.value.message,
                        ), uri
                    assert read.value.code == -32002
                assert await at_upstream(bot) == []
                assert await said(bot, "w_touch", uri="secret://key") == "nobody subscribed"

        run(scenario)

    def test_an_upstream_without_templates_answers_not_found(self, tmp_path: Path) -> None:
        """The upstream serves no ``resources/templates/list``: an unlisted URI is not found, not
        the upstream's method-not-found (found here: it failed every unlisted subscribe)."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw) as bot:
                assert (await bot.list_resource_templates()).resource_templates == []
                with pytest.raises(MCPError) as read:
                    await bot.read_resource("docs://unlisted")
                assert read.value.code == -32002

        run(scenario)


class TestLifetime:
    """Subscriptions end when asked, when the session ends, and survive an upstream restart."""

    def test_unsubscribe_stops_updates(self, tmp_path: Path) -> None:
        """Two sessions on one URI: the first out stops getting it, the last out unsubscribes
        at the upstream."""
        mine, theirs = Updates(), Updates()

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw, mine) as a, client(gw, theirs) as b:
                await subscribe(a, "docs://a")
                await subscribe(b, "docs://a")
                await said(a, "w_touch", uri="docs://a")
                await mine.until(1)
                await theirs.until(1)
                await unsubscribe(a, "docs://a")
                assert await at_upstream(a) == ["docs://a"]  # b still wants it
                await said(a, "w_touch", uri="docs://a")
                await theirs.until(2)
                await subscribe(a, "docs://c")  # a marker: mine's next update is docs://c
                await said(a, "w_touch", uri="docs://c")
                assert await mine.until(2) == ["docs://a", "docs://c"]
                await unsubscribe(b, "docs://a")
                assert await at_upstream(a) == ["docs://c"]
                assert await said(a, "w_touch", uri="docs://a") == "nobody subscribed"

        run(scenario)

    def test_a_session_that_ends_drops_its_subscriptions(self, tmp_path: Path) -> None:
        """Once a client's session is gone the upstream holds nothing for it."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw) as watcher:
                async with client(gw) as gone:
                    await subscribe(gone, "docs://a")
                    await subscribe(gone, "docs://b")
                    assert await at_upstream(watcher) == ["docs://a", "docs://b"]
                assert await at_upstream(watcher) == []

        run(scenario)

    def test_a_reconnect_subscribes_again(self, tmp_path: Path) -> None:
        """The upstream is killed; the next call's reconnect subscribes again, and updates flow."""
        mine = Updates()

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw, mine) as a:
                await subscribe(a, "docs://a")
                first = int(await said(a, "w_pid"))
                os.kill(first, signal.SIGKILL)
                ended = gw.upstreams[0]._ended  # set when the gateway sees the pipe close
                assert ended is not None
                with anyio.fail_after(20):
                    await ended.wait()
                assert int(await said(a, "w_pid")) != first
                assert await at_upstream(a) == ["docs://a"]
                await said(a, "w_touch", uri="docs://a")
                assert await mine.until(1) == ["docs://a"]

        run(scenario)

    def test_a_session_holds_a_bounded_number(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past the bound a subscribe is refused and the upstream not asked; the same URI again
        is no new subscription; another session has a bound of its own."""
        monkeypatch.setattr("callgate.gateway.subscriptions.MAX_PER_SESSION", 2)

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, client(gw) as a, client(gw) as b:
                await subscribe(a, "docs://a")
                await subscribe(a, "docs://b")
                await subscribe(a, "docs://a")
                with pytest.raises(MCPError) as refused:
                    await subscribe(a, "docs://c")
                assert refused.value.code == types.INVALID_REQUEST
                assert await at_upstream(a) == ["docs://a", "docs://b"]
                await subscribe(b, "docs://c")
                assert await at_upstream(a) == ["docs://a", "docs://b", "docs://c"]

        run(scenario)


class TestDeclared:
    """``resources.subscribe`` is declared only when an upstream offers subscriptions."""

    @pytest.mark.parametrize("offered", [True, False])
    def test_declared_as_the_upstreams_offer(self, tmp_path: Path, offered: bool) -> None:
        """In front of the subscribing upstream: declared; in front of one without: not, and a
        subscribe is the SDK's method-not-found."""
        text = CONFIG.format(tmp=tmp_path)
        if not offered:
            text = text.replace("tests.gateway.subscribe_upstream", "tests.gateway.proxy_upstream")

        async def scenario() -> None:
            async with started(text, tmp_path) as gw, client(gw) as bot:
                resources = bot.server_capabilities.resources
                assert resources is not None and bool(resources.subscribe) is offered
                if not offered:
                    with pytest.raises(MCPError) as refused:
                        await subscribe(bot, "docs://readme")
                    assert refused.value.code == types.METHOD_NOT_FOUND

        run(scenario)

    def test_a_subscribe_is_a_masked_span(self, tmp_path: Path) -> None:
        """gateway.resource.subscribe and .unsubscribe carry outcome and upstream; the principal
        and the URI are masked."""
        exporter = InMemorySpanExporter()
        handle = telemetry.configure(
            trail=False, span_exporter=exporter, masking_key=b"test-key-0123456"
        )
        config = parse_config(CONFIG.format(tmp=tmp_path), tmp_path / "gateway.yaml")

        async def scenario() -> None:
            async with running(config, observer=handle.observer) as gw, client(gw) as bot:
                await subscribe(bot, "docs://ana@example.com")
                with pytest.raises(MCPError):
                    await subscribe(bot, "secret://key")
                await unsubscribe(bot, "docs://ana@example.com")

        try:
            run(scenario)
        finally:
            handle.shutdown()
        spans = [s for s in exporter.get_finished_spans() if s.name.startswith("gateway.resource.")]
        outcomes = [(s.name, dict(s.attributes or {})["guard.outcome"]) for s in spans]
        assert outcomes == [
            ("gateway.resource.subscribe", "ok"),
            ("gateway.resource.subscribe", "refused"),
            ("gateway.resource.unsubscribe", "ok"),
        ]
        first = dict(spans[0].attributes or {})
        assert first["gateway.upstream"] == "watched"
        assert "ana@example.com" not in str(first) and first["guard.principal"] != "bot"


class TestHttp:
    """Over streamable HTTP each MCP session (``mcp-session-id``) is its own subscriber."""

    def test_two_sessions_of_one_principal(self, tmp_path: Path) -> None:
        """One session's updates never reach the other; a session that ends (DELETE) drops its
        subscriptions at the upstream."""
        port = free_port()
        config = tmp_path / "gateway.yaml"
        config.write_text(
            CONFIG.format(tmp=tmp_path)
            + f"  http:\n    port: {port}\n    tokens:\n"
            + "      - {token_env: GW_TOKEN_SUB, principal: bot}\n"
        )
        command = gateway_command(config)
        token = "subscribe-token-0123456789"
        process = subprocess.Popen(
            [command.command, *command.args, "--transport", "http"],
            cwd=str(tmp_path),
            env={**os.environ, "GW_TOKEN_SUB": token, "PYTHONPATH": str(REPO)},
            stderr=subprocess.DEVNULL,
        )
        mine, theirs = Updates(), Updates()

        @asynccontextmanager
        async def session(updates: Updates) -> AsyncIterator[Client]:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),  # type: ignore[arg-type]
                    mode="legacy",
                    message_handler=updates.handler,
                ) as c,
            ):
                yield c

        async def scenario() -> None:
            async with session(theirs) as b:
                async with session(mine) as a:
                    await subscribe(a, "docs://a")
                    await subscribe(b, "docs://b")
                    await said(b, "w_touch", uri="docs://a")
                    assert await mine.until(1) == ["docs://a"]
                    await said(a, "w_touch", uri="docs://b")
                    assert await theirs.until(1) == ["docs://b"]
                    await said(b, "w_touch", uri="docs://a")
                    assert await mine.until(2) == ["docs://a", "docs://a"]
                    assert theirs.uris == ["docs://b"]
                # The SDK answers a's DELETE once the session's streams close; the cleanup runs
                # after, in the gateway's process, with nothing a client can wait on: polled.
                with anyio.fail_after(20):
                    while await at_upstream(b) != ["docs://b"]:
                        await anyio.sleep(0.05)

        try:
            wait_for_port(port, timeout=60)
            run(scenario)
        finally:
            process.terminate()
            process.wait(timeout=20)


@asynccontextmanager
async def modern(gw: Gateway) -> AsyncIterator[Client]:
    """A 2026-07-28 client: no MCP session, updates only on ``subscriptions/listen`` streams."""
    server = build_server(gw, lambda ctx: ("bot", "conv-1"))
    async with Client(server) as connected:  # type: ignore[arg-type]
        assert connected.protocol_version == "2026-07-28"
        yield connected


async def next_uri(subscription: Any) -> str:
    with anyio.fail_after(20):
        async for event in subscription:
            assert isinstance(event, ResourceUpdated), event
            return event.uri
    raise AssertionError("the stream ended")


class TestListen:
    """2026-07-28 clients subscribe on ``subscriptions/listen`` streams, under the same rules."""

    def test_a_stream_gets_only_what_its_principal_may_read_and_asked_for(
        self, tmp_path: Path
    ) -> None:
        """The acknowledgement leaves out what bot may not read; each stream gets only its own
        URIs' updates; a stream that ends unsubscribes at the upstream."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw, modern(gw) as a, modern(gw) as b:
                declared = a.server_capabilities.resources
                assert declared is not None and declared.subscribe is True
                async with (
                    a.listen(resource_subscriptions=["docs://a", "secret://key"]) as mine,
                    b.listen(resource_subscriptions=["docs://b"]) as theirs,
                ):
                    assert mine.honored is not None
                    assert mine.honored.resource_subscriptions == ["docs://a"]
                    assert await at_upstream(a) == ["docs://a", "docs://b"]
                    await said(b, "w_touch", uri="docs://a")
                    assert await next_uri(mine) == "docs://a"
                    await said(a, "w_touch", uri="docs://b")
                    assert await next_uri(theirs) == "docs://b"  # not docs://a first
                    await said(b, "w_touch", uri="docs://a")
                    assert await next_uri(mine) == "docs://a"  # not docs://b first
                # The server's handler ends when it sees the cancellation, after the client left.
                with anyio.fail_after(20):
                    while await at_upstream(a) != []:
                        await anyio.sleep(0.05)

        run(scenario)

    def test_tool_listing_changes_reach_a_listening_client(self, tmp_path: Path) -> None:
        """A relist that changes the listing announces it on the stream."""

        async def scenario() -> None:
            async with (
                gateway(tmp_path) as gw,
                modern(gw) as a,
                a.listen(tools_list_changed=True) as stream,
            ):
                assert stream.honored is not None and stream.honored.tools_list_changed
                upstream = gw.upstreams[0]
                upstream.tools = []
                await gw._listed(upstream, [])  # as if the upstream had dropped every tool
                with anyio.fail_after(20):
                    async for event in stream:
                        assert isinstance(event, ToolsListChanged)
                        break

        run(scenario)
