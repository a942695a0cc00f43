"""``callgate gateway`` itself as a subprocess: downstream over stdio, and over HTTP with bearer tokens."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from callgate.gateway.demo import gateway_command
from tests.gateway.clients import payload
from tests.gateway.conftest import effects, free_port, shop_config, wait_for_port

TOKEN_BOT = "bot-token-0123456789abcdef"
TOKEN_READER = "reader-token-0123456789abcdef"


class TestStdio:
    """The gateway as an MCP stdio server, as an agent host would launch it."""

    def test_a_client_session_over_stdio_goes_through_the_guard(self, tmp_path: Path) -> None:
        """List, a read, a refused call, a 300 kB write, and the trail written with the guard's codes."""
        config = tmp_path / "gateway.yaml"
        config.write_text(shop_config(tmp_path))

        async def scenario() -> tuple[list[str], dict[str, Any], dict[str, Any], dict[str, Any]]:
            async with Client(gateway_command(config)) as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                read = await client.call_tool("shop_get_order", {"order_id": "ORD-1"})
                bad = await client.call_tool("shop_get_order", {})
                # One line of 300 kB each way: longer than an asyncio stream's default line limit.
                long = await client.call_tool(
                    "shop_add_note", {"order_id": "L", "text": "y" * 300_000}
                )
                return names, payload(read), payload(bad), payload(long)

        names, read, bad, long = anyio.run(scenario)
        assert long["code"] == "OK" and effects(tmp_path) == ["note L " + "y" * 300_000]
        assert "shop_get_order" in names and "shop_refund" in names
        assert read["code"] == "OK" and read["data"]["order_id"] == "ORD-1"
        assert bad["code"] == "INVALID_ARGUMENTS"
        trail = "".join(p.read_text() for p in (tmp_path / "spans").glob("*.jsonl"))
        assert '"INVALID_ARGUMENTS"' in trail and "shop_get_order" in trail

    def test_a_malformed_config_is_refused_with_its_line(self, tmp_path: Path) -> None:
        """The command exits non-zero, naming file, line and reason, before touching any upstream."""
        config = tmp_path / "gateway.yaml"
        text = shop_config(tmp_path).replace("timeout: 1", "timeout: soon")
        config.write_text(text)
        line = next(i for i, row in enumerate(text.splitlines(), 1) if "timeout: soon" in row)
        command = gateway_command(config)
        done = subprocess.run(
            [command.command, *command.args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode != 0
        assert f"gateway.yaml:{line}: upstreams.shop.timeout: expected" in done.stderr
        assert effects(tmp_path) == []


class TestHttp:
    """Streamable HTTP downstream: bearer tokens map to principals; no token, no entry."""

    def test_tokens_select_principals_and_a_missing_token_gets_401(self, tmp_path: Path) -> None:
        """The bot sees every tool, the reader one; a request without a token is refused; a
        handshake-era client is told the tool listing may change (``listChanged``)."""
        port = free_port()
        config = tmp_path / "gateway.yaml"
        text = shop_config(tmp_path) + (
            "  http:\n"
            f"    port: {port}\n"
            "    tokens:\n"
            "      - {token_env: GW_TOKEN_BOT, principal: bot}\n"
            "      - {token_env: GW_TOKEN_READER, principal: reader}\n"
        )
        config.write_text(text)
        env = {**os.environ, "GW_TOKEN_BOT": TOKEN_BOT, "GW_TOKEN_READER": TOKEN_READER}
        command = gateway_command(config)
        process = subprocess.Popen(
            [command.command, *command.args, "--transport", "http"],
            cwd=str(tmp_path),
            env=env,
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            wait_for_port(port, timeout=30)

            async def scenario() -> tuple[int, list[str], list[str], dict[str, Any], Any]:
                async with httpx2.AsyncClient() as http:
                    anonymous = await http.post(
                        url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
                    )
                async with (
                    httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN_BOT}"}) as http,
                    Client(streamable_http_client(url, http_client=http), mode="legacy") as old,
                ):
                    declared = old.server_capabilities.tools
                views = []
                read: dict[str, Any] = {}
                for token in (TOKEN_BOT, TOKEN_READER):
                    async with (
                        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
                        Client(streamable_http_client(url, http_client=http)) as client,
                    ):
                        views.append([t.name for t in (await client.list_tools()).tools])
                        if token == TOKEN_READER:
                            read = payload(
                                await client.call_tool("shop_get_order", {"order_id": "H1"})
                            )
                return anonymous.status_code, views[0], views[1], read, declared

            status, bot_view, reader_view, read, declared = anyio.run(scenario)
        finally:
            process.terminate()
            process.communicate(timeout=20)
        assert status == 401
        assert declared is not None and declared.list_changed is True  # announced over HTTP too
        assert "shop_refund" in bot_view and len(bot_view) > 1
        assert reader_view == ["shop_get_order"]
        assert read["code"] == "OK"


class TestHttpSessions:
    """Over HTTP, each MCP session (or conversation id) of one principal is its own guard session."""

    def test_two_sessions_of_one_principal_share_no_taint_and_no_replay(
        self, tmp_path: Path
    ) -> None:
        """Session A's untrusted read taints only A; B's identical note runs, not A's replay."""
        port = free_port()
        config = tmp_path / "gateway.yaml"
        config.write_text(
            shop_config(tmp_path)
            + f"  http:\n    port: {port}\n    tokens:\n      - {{token_env: GW_TOKEN_BOT, principal: bot}}\n"
        )
        command = gateway_command(config)
        process = subprocess.Popen(
            [command.command, *command.args, "--transport", "http"],
            cwd=str(tmp_path),
            env={**os.environ, "GW_TOKEN_BOT": TOKEN_BOT},
            stderr=subprocess.PIPE,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        note = {"order_id": "N", "text": "same"}

        async def scenario(mode: str, meta: dict[str, Any] | None) -> list[str]:
            codes = []
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN_BOT}"}) as http,
                Client(streamable_http_client(url, http_client=http), mode=mode) as a,  # type: ignore[arg-type]
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN_BOT}"}) as http2,
                Client(streamable_http_client(url, http_client=http2), mode=mode) as b,  # type: ignore[arg-type]
            ):
                meta_a = {"io.callgate/conversation": "a"} if meta is not None else None
                meta_b = {"io.callgate/conversation": "b"} if meta is not None else None
                codes.append(payload(await a.call_tool("shop_add_note", note, meta=meta_a))["code"])
                page = {"url": "https://example.com"}
                await a.call_tool("shop_fetch_page", page, meta=meta_a)
                second = payload(await b.call_tool("shop_add_note", note, meta=meta_b))
                codes.append(second["code"] + (" replayed" if second.get("replayed") else ""))
                other = {"order_id": "T", "text": mode}
                codes.append(
                    payload(await a.call_tool("shop_add_note", other, meta=meta_a))["code"]
                )
            return codes

        try:
            wait_for_port(port, timeout=30)
            legacy = anyio.run(scenario, "legacy", None)
            (tmp_path / "effects.txt").write_text("")
            modern = anyio.run(scenario, "auto", {})
        finally:
            process.terminate()
            process.communicate(timeout=20)
        assert legacy == ["OK", "OK", "TAINTED_CONTEXT"]
        assert modern == ["OK", "OK", "TAINTED_CONTEXT"]
        assert effects(tmp_path) == ["note N same", "note N same"]
