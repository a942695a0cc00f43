"""Seven published MCP servers through ``callgate gateway`` over stdio, side by side with the direct
connection: every tool listed as the upstream lists it, every harmless call answered as the upstream
answers it, and a malformed call refused by name before the upstream.

Each server is driven once per test session (``conftest.drive``); the tests read that run."""

from __future__ import annotations

import json
from collections.abc import Callable

import mcp_types as types
import pytest

from tests.gateway.real.conftest import Run, verdict, wire
from tests.gateway.real.servers import SERVERS, Call, Server, clock_free

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first test installs the servers

BY_NAME = pytest.mark.parametrize("server", SERVERS, ids=[s.name for s in SERVERS])

PASSED_THROUGH = (
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "execution",
    "_meta",
)
"""The fields of a listed tool the pass-through contract keeps unchanged."""

Runs = Callable[[Server], Run]


def comparable(call: Call, result: types.CallToolResult) -> str:
    """The contract's fields of a result as JSON, its wall clock blanked where it has one."""
    text = json.dumps(wire(result), sort_keys=True)
    return clock_free(text) if call.clocked else text


def result_differences(run: Run) -> dict[str, tuple[str, str]]:
    """Per call whose gateway result differs from the direct one: (direct, gateway)."""
    calls = run.server.calls(run.state)
    pairs = zip(calls, run.results_direct, run.results_gateway, strict=True)
    return {
        f"{call.tool}": (comparable(call, mine), comparable(call, theirs))
        for call, mine, theirs in pairs
        if comparable(call, mine) != comparable(call, theirs)
    }


def listing_differences(run: Run) -> dict[str, tuple[object, object]]:
    """Per ``tool.field`` the gateway lists differently: (upstream's, gateway's)."""
    return {
        f"{name}.{key}": (tool.get(key), run.listed_gateway.get(name, {}).get(key))
        for name, tool in run.listed_direct.items()
        for key in PASSED_THROUGH
        if tool.get(key) != run.listed_gateway.get(name, {}).get(key)
    }


class TestListing:
    """``tools/list`` through the gateway is the upstream's listing."""

    @BY_NAME
    def test_every_tool_is_listed_with_a_byte_identical_input_schema(
        self, server: Server, runs: Runs
    ) -> None:
        """Same names, and each ``inputSchema`` serialises to the same bytes as the upstream's."""
        run = runs(server)
        assert sorted(run.listed_gateway) == sorted(run.listed_direct)
        for name, tool in run.listed_direct.items():
            assert json.dumps(run.listed_gateway[name]["inputSchema"]) == json.dumps(
                tool["inputSchema"]
            ), name

    @BY_NAME
    def test_every_listed_field_passes_through(self, server: Server, runs: Runs) -> None:
        """Title, description, schemas, annotations, ``execution`` and ``_meta`` are the
        upstream's, although the gateway's client speaks 2026-07-28 (which has no ``execution``)
        and the npm servers speak 2025-11-25 to the gateway."""
        assert listing_differences(runs(server)) == {}


class TestCalls:
    """A harmless call per tool answers through the gateway what it answers directly."""

    @BY_NAME
    def test_every_tool_is_called(self, server: Server, runs: Runs) -> None:
        """The calls cover every listed tool but those named uncallable, each with its reason."""
        run = runs(server)
        called = {call.tool for call in server.calls(run.state)}
        assert called | set(server.uncallable) == set(run.listed_direct)
        assert not called & set(server.uncallable)

    @BY_NAME
    def test_every_call_runs_and_leaves_the_state_the_direct_calls_leave(
        self, server: Server, runs: Runs
    ) -> None:
        """Each call is let through (``OK``; writes after a human approved them), and the same
        calls change the server's state exactly as they do directly."""
        run = runs(server)
        assert [verdict(r).get("code") for r in run.results_gateway] == ["OK"] * len(
            run.results_gateway
        )
        assert run.effects_gateway == run.effects_direct

    @BY_NAME
    def test_every_result_is_the_upstreams(self, server: Server, runs: Runs) -> None:
        """content, structuredContent and isError equal the direct call's (the verdict in ``_meta``)."""
        assert result_differences(runs(server)) == {}


class TestRefusals:
    """A call that breaks the upstream's schema is refused by name, and never reaches the upstream."""

    @BY_NAME
    def test_a_schema_breaking_call_is_refused_with_its_code(
        self, server: Server, runs: Runs
    ) -> None:
        """The stable code comes back as a tool error; the server's state is untouched."""
        run = runs(server)
        *_, code = server.refused(run.state)
        assert run.refused.is_error is True
        assert verdict(run.refused)["code"] == code
        before, after = run.effects_refused
        assert after == before


class TestVerdict:
    """The guard's verdict travels beside the upstream's result, in ``_meta["callgate"]``."""

    @BY_NAME
    def test_every_answer_carries_the_verdict_in_meta(self, server: Server, runs: Runs) -> None:
        """Results let through and the refusal alike carry ``code`` and ``ok`` in ``_meta``."""
        run = runs(server)
        for result in [*run.results_gateway, run.refused]:
            found = (result.meta or {}).get("callgate")
            assert isinstance(found, dict) and {"code", "ok"} <= set(found), result.meta
