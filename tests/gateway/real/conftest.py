"""The installed servers, a local page for the fetch server, and the two ways to reach a server:
directly, and through ``callgate gateway`` (a subprocess, over stdio) with the SDK client."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters

from callgate.gateway.demo import gateway_command
from tests.gateway.real.install import Installed, install
from tests.gateway.real.servers import Server

PAGE = b"<html><head><title>Tides</title></head><body><h1>Tides</h1><p>The moon pulls the sea.</p></body></html>"


@pytest.fixture(scope="session")
def installed() -> Installed:
    """The seven servers, the conformance suite and Node 22, installed once into the cache."""
    return install()


@pytest.fixture(scope="session")
def page_url() -> Iterator[str]:
    """A page on 127.0.0.1 for the fetch server (the tests reach nothing else)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/tides.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def fresh(server: Server, state: Path, page_url: str) -> Path:
    """``state`` laid out anew for ``server``: the same paths and contents for every run."""
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    (state / "url.txt").write_text(page_url)
    server.prepare(state)
    return state


def inherited() -> dict[str, str]:
    """What the gateway passes its stdio upstreams besides the SDK's safe variables (and what its
    own process needs to import the tree under test)."""
    return {k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "VIRTUAL_ENV")}


def direct(server: Server, installed: Installed, state: Path) -> StdioServerParameters:
    """The server as its own stdio process, with the environment the gateway gives it."""
    command, env = server.launch(installed, state)
    return StdioServerParameters(
        command=command[0], args=command[1:], env={**inherited(), **env}, cwd=str(state)
    )


def gateway_config(
    server: Server, installed: Installed, state: Path, work: Path, *, wrap: list[str] | None = None
) -> Path:
    """A gateway config in ``work`` with ``server`` as its one upstream (no namespace), for ``bot``.

    ``wrap`` goes in front of the server's command (a relay that rewrites what it lists)."""
    command, env = server.launch(installed, state)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "gateway.yaml"
    config.write_text(
        f"""\
store: {json.dumps(str(work / "gateway.db"))}
telemetry: {{trail_dir: {json.dumps(str(work / "spans"))}}}
upstreams:
  {server.name}:
    command: {json.dumps([*(wrap or []), *command])}
    env: {json.dumps(env)}
    cwd: {json.dumps(str(state))}
    timeout: 30
    connect_timeout: 60
principals:
  bot: {{tools: ["*"]}}
serve:
  stdio: {{principal: bot}}
"""
    )
    return config


@asynccontextmanager
async def through_gateway(
    config: Path, *, asked: list[str] | None = None, approve: bool = True
) -> AsyncIterator[Client]:
    """An SDK client of ``callgate gateway --config config`` over stdio.

    With ``asked``, the client declares elicitation and a human answers ``approve`` to every
    question (each question's text appended to ``asked``); without, it declares none."""

    async def human(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert asked is not None
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"approve": approve})

    # The tree under test: a stdio child gets only the SDK's safe variables, so without
    # PYTHONPATH the gateway would run whichever callgate the interpreter has installed.
    command = gateway_command(config).model_copy(update={"env": inherited()})
    async with Client(command, elicitation_callback=human if asked is not None else None) as client:
        yield client


RUG = Path(__file__).with_name("rug.py")


@dataclass(kw_only=True)
class Run:
    """One server driven directly and through the gateway, with the same calls on the same state."""

    server: Server
    state: Path
    config: Path
    """The gateway's config; its upstream command goes through ``rug.py``, which relays unchanged
    until ``rug_flag`` exists."""
    rug_flag: Path
    listed_direct: dict[str, dict[str, Any]]
    listed_gateway: dict[str, dict[str, Any]]
    results_direct: list[types.CallToolResult]
    results_gateway: list[types.CallToolResult]
    effects_direct: Any
    effects_gateway: Any
    refused: types.CallToolResult
    effects_refused: tuple[Any, Any]
    """The state before and after the refused call."""
    asked: list[str]


def drive(server: Server, installed: Installed, work: Path, page_url: str) -> Run:
    """List and call every tool directly, then through the gateway (a refusal first, a human
    approving whatever waits for one), each time on a fresh state in the same folder."""
    state = fresh(server, work / "state", page_url)
    calls = server.calls(state)
    flag = work / "rug-pulled"
    wrap = ["python", str(RUG), str(flag), calls[0].tool]
    config = gateway_config(server, installed, state, work / "gw", wrap=wrap)
    asked: list[str] = []

    async def run_direct() -> tuple[dict[str, dict[str, Any]], list[types.CallToolResult]]:
        async with Client(direct(server, installed, state)) as upstream:
            listed = {t.name: definition(t) for t in (await upstream.list_tools()).tools}
            return listed, [await upstream.call_tool(c.tool, c.arguments) for c in calls]

    async def run_gateway() -> tuple[
        dict[str, dict[str, Any]], types.CallToolResult, tuple[Any, Any], list[types.CallToolResult]
    ]:
        async with through_gateway(config, asked=asked) as client:
            listed = {t.name: definition(t) for t in (await client.list_tools()).tools}
            tool, arguments, _ = server.refused(state)
            before = server.effects(state)
            refused = await client.call_tool(tool, arguments)
            around = (before, server.effects(state))
            return (
                listed,
                refused,
                around,
                [await client.call_tool(c.tool, c.arguments) for c in calls],
            )

    listed_direct, results_direct = anyio.run(run_direct)
    effects_direct = server.effects(state)
    fresh(server, state, page_url)
    listed_gateway, refused, around, results_gateway = anyio.run(run_gateway)
    return Run(
        server=server,
        state=state,
        config=config,
        rug_flag=flag,
        listed_direct=listed_direct,
        listed_gateway=listed_gateway,
        results_direct=results_direct,
        results_gateway=results_gateway,
        effects_direct=effects_direct,
        effects_gateway=server.effects(state),
        refused=refused,
        effects_refused=around,
        asked=asked,
    )


@pytest.fixture(scope="session")
def runs(
    installed: Installed, page_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Server], Run]:
    """Each server's run, driven once per test session, at the first test that asks for it."""
    done: dict[str, Run] = {}

    def run_of(server: Server) -> Run:
        if server.name not in done:
            done[server.name] = drive(
                server, installed, tmp_path_factory.mktemp(server.name), page_url
            )
        return done[server.name]

    return run_of


def wire(result: types.CallToolResult) -> dict[str, Any]:
    """What the pass-through contract compares: content, structuredContent and isError, as JSON."""
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {key: dumped.get(key) for key in ("content", "structuredContent", "isError")} | {
        "isError": bool(dumped.get("isError", False))
    }


def verdict(result: types.CallToolResult) -> dict[str, Any]:
    """The guard's verdict: the result's ``_meta["callgate"]`` (the pass-through contract), or,
    from a gateway that still renders the guard's result in place of the upstream's, its
    ``structuredContent``. ``TestVerdict`` holds the gateway to the first."""
    found = (result.meta or {}).get("callgate")
    if found is None:
        found = result.structured_content
    assert isinstance(found, dict), f"no verdict in {result.model_dump(by_alias=True)}"
    return found


def definition(tool: types.Tool) -> dict[str, Any]:
    """A listed tool as wire JSON."""
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)
