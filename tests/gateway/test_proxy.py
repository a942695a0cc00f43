"""Besides tools: progress and logs relayed; resources, prompts, completions proxied under allowlists;
sampling, elicitation and roots refused."""

from __future__ import annotations

import os
import re
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
from mcp.shared.exceptions import MCPError
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import telemetry
from callgate.gateway import Gateway, parse_config, running
from callgate.gateway.demo import gateway_command
from callgate.gateway.server import build_server
from tests.gateway.clients import payload, started
from tests.gateway.conftest import free_port, wait_for_port

REPO = Path(__file__).resolve().parents[2]

CONFIG = """\
store: {tmp}/gateway.db
telemetry: {{trail_dir: "{tmp}/spans"}}
upstreams:
  lib:
    command: [python, -m, tests.gateway.proxy_upstream]
    namespace: lib
    timeout: 20
    connect_timeout: 30
principals:
  bot:
    tools: ["*"]
    resources: ["docs://*"]
    prompts: ["*"]
  reader:
    tools: [lib_count]
serve:
  stdio: {{principal: bot}}
"""


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


@asynccontextmanager
async def gateway(tmp: Path) -> AsyncIterator[Gateway]:
    async with started(CONFIG.format(tmp=tmp), tmp) as gw:
        yield gw


@asynccontextmanager
async def client(gw: Gateway, principal: str = "bot", **options: Any) -> AsyncIterator[Client]:
    server = build_server(gw, lambda ctx: (principal, "conv-1"))
    async with Client(server, **options) as connected:  # type: ignore[arg-type]
        yield connected


def text(result: types.ReadResourceResult) -> str:
    block = result.contents[0]
    assert isinstance(block, types.TextResourceContents)
    return block.text


class TestRelayed:
    """What an upstream sends during a call reaches the client that made it."""

    def test_progress_and_log_messages_reach_the_caller(self, tmp_path: Path) -> None:
        """Four progress notifications and three log messages, as a direct call gets."""
        progress: list[float] = []
        logs: list[Any] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logs.append(params.data)

        async def scenario() -> None:
            async with (
                gateway(tmp_path) as gw,
                client(gw, logging_callback=on_log, log_level="debug") as c,
            ):
                result = await c.call_tool("lib_count", {}, progress_callback=on_progress)
                assert not result.is_error

        run(scenario)
        assert progress == [1, 2, 3, 4]
        assert logs == ["counted 1", "counted 2", "counted 3"]

    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    def test_over_http_in_both_protocol_eras(self, tmp_path: Path, mode: str) -> None:
        """Over streamable HTTP, handshake-era and 2026-07-28 clients get the same relays and reads."""
        port = free_port()
        config = tmp_path / "gateway.yaml"
        config.write_text(
            CONFIG.format(tmp=tmp_path)
            + f"  http:\n    port: {port}\n    tokens:\n"
            + "      - {token_env: GW_TOKEN_PROXY, principal: bot}\n"
        )
        command = gateway_command(config)
        token = "proxy-token-0123456789"
        process = subprocess.Popen(
            [command.command, *command.args, "--transport", "http"],
            cwd=str(tmp_path),
            # The upstream is ``python -m tests.gateway...``: the repository on its Python path.
            env={**os.environ, "GW_TOKEN_PROXY": token, "PYTHONPATH": str(REPO)},
            stderr=subprocess.DEVNULL,
        )
        progress: list[float] = []
        logs: list[Any] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logs.append(params.data)

        async def scenario() -> str:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                Client(
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),  # type: ignore[arg-type]
                    mode=mode,  # type: ignore[arg-type]
                    logging_callback=on_log,
                    log_level="debug",
                ) as c,
            ):
                await c.call_tool("lib_count", {}, progress_callback=on_progress)
                return text(await c.read_resource("docs://readme"))

        try:
            wait_for_port(port, timeout=60)
            assert anyio.run(scenario) == "read me first"
        finally:
            process.terminate()
            process.wait(timeout=20)
        assert progress == [1, 2, 3, 4]
        assert logs == ["counted 1", "counted 2", "counted 3"]


class TestResources:
    """Resources are read-only and each principal sees and reads only what its patterns name."""

    def test_listing_and_reading_follow_the_allowlist(self, tmp_path: Path) -> None:
        """bot lists and reads docs://*, not secret://; reader, with no patterns, nothing."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw:
                async with client(gw) as bot:
                    listed = await bot.list_resources()
                    assert [str(r.uri) for r in listed.resources] == ["docs://readme"]
                    templates = await bot.list_resource_templates()
                    assert [t.uri_template for t in templates.resource_templates] == [
                        "docs://pages/{page}"
                    ]
                    assert text(await bot.read_resource("docs://readme")) == "read me first"
                    assert text(await bot.read_resource("docs://pages/7")) == "page 7"
                    with pytest.raises(MCPError) as refused:
                        await bot.read_resource("secret://key")
                    assert refused.value.code == -32002
                async with client(gw, "reader") as reader:
                    assert (await reader.list_resources()).resources == []
                    with pytest.raises(MCPError) as refused:
                        await reader.read_resource("docs://readme")
                    assert refused.value.code == -32002

        run(scenario)

    def test_a_returned_resource_link_is_readable_by_who_may_read_it(self, tmp_path: Path) -> None:
        """The link a tool returned reads through the gateway for bot, and not for reader."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw:
                async with client(gw) as bot:
                    result = await bot.call_tool("lib_report_link", {})
                    assert "docs://pages/report" in result.model_dump_json()
                    assert text(await bot.read_resource("docs://pages/report")) == "page report"
                async with client(gw, "reader") as reader:
                    with pytest.raises(MCPError):
                        await reader.read_resource("docs://pages/report")

        run(scenario)

    def test_a_read_is_a_span_masked_like_the_guards(self, tmp_path: Path) -> None:
        """gateway.resource.read carries the outcome and upstream; principal and URI are masked."""
        exporter = InMemorySpanExporter()
        handle = telemetry.configure(
            trail=False, span_exporter=exporter, masking_key=b"test-key-0123456"
        )
        text_ = CONFIG.format(tmp=tmp_path)
        config = parse_config(text_, tmp_path / "gateway.yaml")

        async def scenario() -> None:
            async with running(config, observer=handle.observer) as gw, client(gw) as bot:
                await bot.read_resource("docs://pages/ana@example.com")
                with pytest.raises(MCPError):
                    await bot.read_resource("secret://key")

        try:
            run(scenario)
        finally:
            handle.shutdown()
        reads = [s for s in exporter.get_finished_spans() if s.name == "gateway.resource.read"]
        assert [dict(s.attributes or {})["guard.outcome"] for s in reads] == ["ok", "refused"]
        first = dict(reads[0].attributes or {})
        assert first["gateway.upstream"] == "lib"
        assert "ana@example.com" not in str(first) and first["guard.principal"] != "bot"

    @pytest.mark.parametrize("read", ["resource", "prompt"])
    def test_reading_upstream_text_taints_the_session(self, tmp_path: Path, read: str) -> None:
        """A write runs before a resource read or a prompt, and waits for a human after one."""

        async def scenario() -> list[str]:
            async with gateway(tmp_path) as gw, client(gw) as bot:
                before = await bot.call_tool("lib_save_note", {"text": "one"})
                if read == "resource":
                    await bot.read_resource("docs://readme")
                else:
                    await bot.get_prompt("lib_greet", {"name": "Ana"})
                after = await bot.call_tool("lib_save_note", {"text": "two"})
                return [str(payload(r)["code"]) for r in (before, after)]

        before, after = anyio.run(scenario)
        assert before == "OK"
        assert after in ("TAINTED_CONTEXT", "UNTRUSTED_VALUE"), after

    def test_a_uri_two_upstreams_offer_is_read_from_neither(self, tmp_path: Path) -> None:
        """One upstream cannot answer for another's URI: a shared URI or template is refused."""
        text_ = CONFIG.format(tmp=tmp_path).replace(
            "principals:",
            "  lib2:\n    command: [python, -m, tests.gateway.proxy_upstream]\n"
            "    namespace: lib2\n    connect_timeout: 30\nprincipals:",
        )

        async def scenario() -> None:
            async with started(text_, tmp_path) as gw, client(gw) as bot:
                for uri in ("docs://readme", "docs://pages/7"):
                    with pytest.raises(MCPError) as refused:
                        await bot.read_resource(uri)
                    assert refused.value.code == -32002
                await bot.call_tool("lib_report_link", {})  # lib returned it: lib answers
                assert text(await bot.read_resource("docs://pages/report")) == "page report"

        run(scenario)


class TestPrompts:
    """Prompts and completions carry the upstream's namespace and follow the allowlist."""

    def test_prompts_list_get_and_complete(self, tmp_path: Path) -> None:
        """bot lists, gets and completes lib_greet; reader sees none and gets none."""

        async def scenario() -> None:
            async with gateway(tmp_path) as gw:
                async with client(gw) as bot:
                    names = [p.name for p in (await bot.list_prompts()).prompts]
                    assert names == ["lib_greet"]
                    got = await bot.get_prompt("lib_greet", {"name": "Ana"})
                    content = got.messages[0].content
                    assert isinstance(content, types.TextContent)
                    assert content.text == "Say hello to Ana."
                    done = await bot.complete(
                        types.PromptReference(type="ref/prompt", name="lib_greet"),
                        {"name": "name", "value": "al"},
                    )
                    assert done.completion.values == ["alice", "alan"]
                async with client(gw, "reader") as reader:
                    assert (await reader.list_prompts()).prompts == []
                    with pytest.raises(MCPError):
                        await reader.get_prompt("lib_greet", {"name": "Ana"})

        run(scenario)


class TestRefused:
    """An upstream cannot reach the client's model, human or file system through the gateway."""

    def test_sampling_elicitation_and_roots_never_reach_the_client(self, tmp_path: Path) -> None:
        """Each request fails at the upstream; the client's callbacks are never called."""
        reached: list[str] = []

        async def sampling(context: Any, params: Any) -> Any:
            reached.append("sampling")
            return types.CreateMessageResult(
                role="assistant", content=types.TextContent(type="text", text="x"), model="m"
            )

        async def elicitation(context: Any, params: Any) -> Any:
            reached.append("elicitation")
            return types.ElicitResult(action="accept", content={"p": "hunter2"})

        async def roots(context: Any) -> Any:
            reached.append("roots")
            return types.ListRootsResult(roots=[])

        async def scenario() -> None:
            async with (
                gateway(tmp_path) as gw,
                client(
                    gw,
                    sampling_callback=sampling,
                    elicitation_callback=elicitation,
                    list_roots_callback=roots,
                ) as c,
            ):
                result = await c.call_tool("lib_reach_client", {})
                dumped = result.model_dump_json()
                for feature in ("sampling", "elicitation", "roots"):
                    assert re.search(feature + r"\W+refused", dumped), dumped

        run(scenario)
        assert reached == []
