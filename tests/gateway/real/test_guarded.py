"""The guard's promises in front of the published servers: a high-risk write waits for a human and
runs once, and a tool whose definition changed after it was pinned is blocked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.gateway.real.conftest import (
    Run,
    fresh,
    gateway_config,
    through_gateway,
    verdict,
    wire,
)
from tests.gateway.real.install import Installed
from tests.gateway.real.servers import SERVERS, Call, Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first test installs the servers

BY_NAME = pytest.mark.parametrize("server", SERVERS, ids=[s.name for s in SERVERS])

HIGH_RISK = {
    "filesystem": lambda state: Call(
        tool="write_file", arguments={"path": f"{state}/new.txt", "content": "new\n"}
    ),
    "memory": lambda state: Call(tool="delete_entities", arguments={"entityNames": ["Ada"]}),
    "sqlite": lambda state: Call(
        tool="create_table", arguments={"query": "CREATE TABLE t (x INTEGER)"}
    ),
}
"""A write per server that waits for a human at the default ``confirm_at: high``: a destructive
write, or any write of an unannotated server (sqlite)."""

MEMORY = '{"type": "entity", "name": "Ada", "entityType": "person", "observations": []}\n'

WRITERS = [s for s in SERVERS if s.name in HIGH_RISK]
BY_WRITER = pytest.mark.parametrize("server", WRITERS, ids=[s.name for s in WRITERS])


@dataclass(frozen=True, kw_only=True)
class Approval:
    """A high-risk write proposed without a human, then approved in elicitation, then repeated."""

    pending: types.CallToolResult
    first: types.CallToolResult
    again: types.CallToolResult
    before: Any
    """The server's state before anything ran."""
    unattended: Any
    """Its state after the unattended proposal."""
    after: Any
    asked: list[str]
    tool: str


def approve(server: Server, installed: Installed, work: Path, page_url: str) -> Approval:
    """Propose ``HIGH_RISK[server]`` from a client without elicitation, then from one whose human
    approves, then once more."""
    state = fresh(server, work / "state", page_url)
    call = HIGH_RISK[server.name](state)
    if server.name == "memory":  # something to delete, in the server's own file format
        (state / "memory.jsonl").write_text(MEMORY)
    before = server.effects(state)
    asked: list[str] = []
    config = gateway_config(server, installed, state, work / "gw")

    async def unattended() -> types.CallToolResult:
        async with through_gateway(config) as client:
            return await client.call_tool(call.tool, call.arguments)

    async def attended() -> tuple[types.CallToolResult, types.CallToolResult]:
        async with through_gateway(config, asked=asked) as client:
            first = await client.call_tool(call.tool, call.arguments)
            return first, await client.call_tool(call.tool, call.arguments)

    pending = anyio.run(unattended)
    left = server.effects(state)
    first, again = anyio.run(attended)
    return Approval(
        pending=pending,
        first=first,
        again=again,
        before=before,
        unattended=left,
        after=server.effects(state),
        asked=asked,
        tool=call.tool,
    )


@pytest.fixture(scope="module")
def approvals(
    installed: Installed, page_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Server], Approval]:
    """Each writer's approval, run once for the module."""
    done: dict[str, Approval] = {}

    def approval_of(server: Server) -> Approval:
        if server.name not in done:
            work = tmp_path_factory.mktemp(f"approve-{server.name}")
            done[server.name] = approve(server, installed, work, page_url)
        return done[server.name]

    return approval_of


class TestApproveOnce:
    """A high-risk write runs only after a human approved it, exactly once."""

    @BY_WRITER
    def test_a_write_waits_then_runs_once_and_its_repeat_replays(
        self, server: Server, approvals: Callable[[Server], Approval]
    ) -> None:
        """Without elicitation the write is pending and changes nothing; approved in elicitation it
        runs, and the identical call again replays the result without asking or running."""
        seen = approvals(server)
        assert verdict(seen.pending)["code"] == "CONFIRMATION_REQUIRED"
        assert seen.unattended == seen.before
        assert verdict(seen.first)["code"] == "OK" and len(seen.asked) == 1
        assert seen.tool in seen.asked[0]
        assert verdict(seen.again).get("replayed") is True and len(seen.asked) == 1
        assert seen.after != seen.before

    @BY_WRITER
    def test_a_replay_is_the_stored_upstream_result(
        self, server: Server, approvals: Callable[[Server], Approval]
    ) -> None:
        """The repeat answers the first answer's content and structured content, unchanged."""
        seen = approvals(server)
        assert wire(seen.again) == wire(seen.first)


class TestRugPull:
    """A definition that changes after it was pinned blocks its tool."""

    @BY_NAME
    def test_a_changed_description_hides_the_tool_and_refuses_its_calls(
        self, server: Server, runs: Callable[[Server], Run]
    ) -> None:
        """After the run pinned every tool, the next start lists a changed description for one: it
        leaves ``tools/list``, a call ends ``TOOL_DEFINITION_CHANGED`` with nothing run, the other
        tools stay."""
        run = runs(server)
        call = server.calls(run.state)[0]

        async def pulled() -> tuple[list[str], types.CallToolResult]:
            async with through_gateway(run.config, asked=[]) as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                return names, await client.call_tool(call.tool, call.arguments)

        before = server.effects(run.state)
        run.rug_flag.touch()
        names, result = anyio.run(pulled)
        found: dict[str, Any] = verdict(result)
        assert call.tool in run.listed_gateway and call.tool not in names
        assert sorted(names) == sorted(n for n in run.listed_gateway if n != call.tool)
        assert result.is_error is True and found["code"] == "TOOL_DEFINITION_CHANGED"
        assert server.effects(run.state) == before
