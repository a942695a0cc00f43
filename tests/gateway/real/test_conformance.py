"""The MCP conformance suite and the SDK client over streamable HTTP, against the reference
``everything`` server directly and through ``callgate gateway`` (HTTP upstream, HTTP downstream)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.gateway.real.conformance import TOKEN, Deployment, deployed, score, table
from tests.gateway.real.conftest import definition, wire
from tests.gateway.real.install import Installed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the first test installs the servers


@pytest.fixture(scope="module")
def deployment(
    installed: Installed, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The reference server over HTTP and the gateway in front of it, for this module."""
    with deployed(installed, tmp_path_factory.mktemp("conformance")) as up:
        yield up


@pytest.fixture(scope="module")
def scores(
    installed: Installed, deployment: Deployment, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, bool], dict[str, bool]]:
    """The suite's verdict per scenario: the reference server directly, then through the gateway."""
    out = tmp_path_factory.mktemp("scores")
    direct = score(installed, deployment.direct_url, out / "direct")
    gateway = score(installed, deployment.relay_url, out / "gateway")
    print("\n" + table(direct, gateway))
    return direct, gateway


class TestConformance:
    """The conformance suite's server scenarios, side by side."""

    def test_the_suite_runs_every_scenario_against_both(
        self, scores: tuple[dict[str, bool], dict[str, bool]]
    ) -> None:
        """Both runs report the same scenarios, 30 of them or more (a suite that ran nothing fails)."""
        direct, gateway = scores
        assert sorted(gateway) == sorted(direct)
        assert len(direct) >= 30
        assert sum(direct.values()) > 0

    def test_the_gateway_passes_what_the_reference_server_passes(
        self, scores: tuple[dict[str, bool], dict[str, bool]]
    ) -> None:
        """No scenario the server passes directly fails through the gateway (issue 21 item 12),
        resource subscriptions included."""
        direct, gateway = scores
        lost = sorted(name for name, passed in direct.items() if passed and not gateway.get(name))
        assert lost == []
        assert sum(gateway.values()) >= sum(direct.values())


class TestHttp:
    """The SDK client over streamable HTTP, with the gateway's bearer token."""

    def test_the_listing_and_a_call_equal_the_direct_ones(self, deployment: Deployment) -> None:
        """Same tools with byte-identical input schemas, and ``echo`` answers the same content."""

        async def session(
            url: str, headers: dict[str, str]
        ) -> tuple[dict[str, Any], dict[str, Any]]:
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                listed = {tool.name: definition(tool) for tool in (await client.list_tools()).tools}
                echoed = await client.call_tool("echo", {"message": "over http"})
                return listed, wire(echoed)

        async def both() -> tuple[
            tuple[dict[str, Any], dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]
        ]:
            direct = await session(deployment.direct_url, {})
            gateway = await session(deployment.gateway_url, {"Authorization": f"Bearer {TOKEN}"})
            return direct, gateway

        (listed, echoed), (listed_gw, echoed_gw) = anyio.run(both)
        assert sorted(listed_gw) == sorted(listed)
        for name, tool in listed.items():
            assert json.dumps(listed_gw[name]["inputSchema"]) == json.dumps(tool["inputSchema"]), (
                name
            )
        assert echoed_gw["content"] == echoed["content"]
