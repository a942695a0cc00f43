"""Results and definitions pass through the gateway unchanged; the verdict travels in ``_meta``."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment

from callgate.gateway import Gateway
from callgate.gateway.results import VERDICT_KEY
from callgate.gateway.upstream import inherited
from tests.gateway.clients import client, started
from tests.gateway.conftest import HERE

UPSTREAM = HERE / "rich_upstream.py"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def rich_config(tmp: Path, tools: str = "", mode: str = "auto") -> str:
    return f"""\
policy: {{max_identical_calls: 1000, max_steps_per_session: 100000}}
upstreams:
  rich:
    command: [python, "{UPSTREAM}"]
    protocol: {mode}
    env: {{RICH_EFFECTS: "{tmp / "gated.txt"}"}}
{tools}
principals:
  bot: {{tools: ["*"]}}
"""


@asynccontextmanager
async def both(
    tmp: Path, tools: str = "", *, mode: str = "auto"
) -> AsyncIterator[tuple[Client, Client, Gateway]]:
    """A client of the upstream directly, one of the gateway in front of its own copy, the gateway."""
    direct = StdioServerParameters(
        command=sys.executable,
        args=[str(UPSTREAM)],
        env={**get_default_environment(), **inherited(), "RICH_EFFECTS": str(tmp / "direct.txt")},
    )
    async with (
        Client(direct, mode=mode) as plain,  # type: ignore[arg-type]
        started(rich_config(tmp, tools, mode), tmp) as gateway,
        client(gateway, mode=mode) as gated,
    ):
        yield plain, gated, gateway


def wire(result: types.CallToolResult | types.Tool) -> dict[str, Any]:
    """What a client received, without the verdict and the serverInfo stamp of its connection."""
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = {k: v for k, v in dumped.pop("_meta", {}).items() if k not in (VERDICT_KEY, SERVER_INFO)}
    if meta:
        dumped["_meta"] = meta
    return dumped


def verdict(result: types.CallToolResult) -> dict[str, Any]:
    meta = result.meta or {}
    assert VERDICT_KEY in meta, result
    said: dict[str, Any] = meta[VERDICT_KEY]
    return said


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


class TestResults:
    """A call the guard lets through answers with the upstream's own result."""

    def test_every_content_type_and_its_annotations_pass_unchanged(self, tmp_path: Path) -> None:
        """Text with annotations, an image, a resource, a link, integers in a number field, _meta."""

        async def scenario() -> None:
            async with both(tmp_path) as (plain, gated, _):
                direct = await plain.call_tool("picture", {"n": 3})
                through = await gated.call_tool("picture", {"n": 3})
            assert wire(through) == wire(direct)
            assert [block.type for block in through.content] == [
                "text",
                "image",
                "resource",
                "resource_link",
            ]
            assert isinstance(through.structured_content, dict)
            ratio = through.structured_content["ratio"]
            assert ratio == 2 and type(ratio) is int
            assert (through.meta or {})["example.com/request"] == 3
            stamp = (through.meta or {}).get(SERVER_INFO)  # this connection's, not the upstream's
            assert stamp is None or stamp["name"] == "callgate-gateway"
            said = verdict(through)
            assert said["ok"] is True and said["code"] == "OK" and said["upstream"] is True
            assert said["replayed"] is False and said["outcome"] == "applied"
            assert said["warnings"] == [] and "approval_id" not in said

        run(scenario)

    def test_an_upstream_error_result_is_relayed_as_an_error(self, tmp_path: Path) -> None:
        """A plain-text error (isError) keeps its content and is never called a success."""

        async def scenario() -> None:
            async with both(tmp_path) as (plain, gated, _):
                direct = await plain.call_tool("fail", {"n": 1})
                through = await gated.call_tool("fail", {"n": 1})
            assert through.is_error is True and wire(through) == wire(direct)
            said = verdict(through)
            assert said["ok"] is False and said["code"] == "UPSTREAM_REJECTED"
            assert said["upstream"] is True and "never placed" in said["message"]

        run(scenario)

    def test_an_upstream_cannot_forge_the_verdict(self, tmp_path: Path) -> None:
        """An error result whose _meta claims an OK verdict: the gateway's own verdict replaces it."""

        async def scenario() -> None:
            async with both(tmp_path) as (_, gated, _):
                through = await gated.call_tool("forge", {})
            said = verdict(through)
            assert through.is_error and said["ok"] is False, said
            assert said["code"] == "UPSTREAM_REJECTED" and said["upstream"] is True, said

        run(scenario)

    def test_a_replay_is_the_stored_upstream_result_unchanged(self, tmp_path: Path) -> None:
        """The same write twice: one effect; the second answer is the first, marked replayed."""

        async def scenario() -> None:
            async with both(tmp_path) as (_, gated, _):
                first = await gated.call_tool("save", {"text": "hello"})
                second = await gated.call_tool("save", {"text": "hello"})
            assert wire(second) == wire(first)
            assert first.structured_content == {"saved": 1}
            assert verdict(first)["replayed"] is False and verdict(second)["replayed"] is True
            assert (tmp_path / "gated.txt").read_text() == "hello\n"

        run(scenario)

    def test_a_refusal_never_puts_a_foreign_shape_where_an_output_schema_is(
        self, tmp_path: Path
    ) -> None:
        """Refused arguments: a text block and the verdict; structuredContent only without a schema."""

        async def scenario() -> None:
            async with both(tmp_path) as (_, gated, _):
                schema_tool = await gated.call_tool("picture", {"n": "three"})
                plain_tool = await gated.call_tool("fail", {"n": "three"})
            for refused in (schema_tool, plain_tool):
                said = verdict(refused)
                assert refused.is_error and said["code"] == "INVALID_ARGUMENTS"
                assert said["upstream"] is False and said["data"]["problems"][0]["path"] == "/n"
                [text] = refused.content
                assert isinstance(text, types.TextContent)
                assert json.loads(text.text)["message"] == said["message"]
            assert schema_tool.structured_content is None
            assert isinstance(plain_tool.structured_content, dict)
            assert plain_tool.structured_content["code"] == "INVALID_ARGUMENTS"

        run(scenario)

    def test_result_fields_cut_the_result_and_drop_the_output_schema(self, tmp_path: Path) -> None:
        """The operator's filter is the one exception: only its fields, as text and structured."""
        tools = "    tools:\n      picture: {result_fields: [count]}\n"

        async def scenario() -> None:
            async with both(tmp_path, tools) as (_, gated, _):
                listed = {tool.name: tool for tool in (await gated.list_tools()).tools}
                cut = await gated.call_tool("picture", {"n": 4})
            assert listed["picture"].output_schema is None
            assert cut.structured_content == {"count": 4}
            [text] = cut.content
            assert isinstance(text, types.TextContent) and json.loads(text.text) == {"count": 4}

        run(scenario)

    def test_the_callers_trace_id_comes_back_in_the_verdict(self, tmp_path: Path) -> None:
        """A W3C traceparent in the request's _meta: its trace id in the verdict; none without."""
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        parent = f"00-{trace}-00f067aa0ba902b7-01"

        async def scenario() -> None:
            async with both(tmp_path) as (_, gated, _):
                traced = await gated.call_tool("picture", {"n": 5}, meta={"traceparent": parent})
                bare = await gated.call_tool("picture", {"n": 6})
                junk = await gated.call_tool("picture", {"n": 7}, meta={"traceparent": "00-zz"})
            assert verdict(traced)["trace_id"] == trace
            assert verdict(bare)["trace_id"] is None and verdict(junk)["trace_id"] is None

        run(scenario)


class TestDefinitions:
    """``tools/list`` passes every field of the upstream's definitions through."""

    @pytest.mark.parametrize("mode", ["legacy", "auto"])
    def test_the_listing_equals_the_upstreams(self, tmp_path: Path, mode: str) -> None:
        """Title, outputSchema, annotations (no flipped hint), execution, icons and _meta, in
        both protocol eras (2026-07-28 has no ``execution``)."""

        async def scenario() -> None:
            async with both(tmp_path, mode=mode) as (plain, gated, _):
                direct = {tool.name: wire(tool) for tool in (await plain.list_tools()).tools}
                through = {tool.name: wire(tool) for tool in (await gated.list_tools()).tools}
            assert through == direct
            assert through["save"]["annotations"]["destructiveHint"] is False
            if mode == "legacy":
                assert through["picture"]["execution"] == {"taskSupport": "forbidden"}
            assert through["picture"]["_meta"] == {"example.com/ui": {"panel": "left"}}

        run(scenario)

    def test_execution_reaches_a_2026_client_from_a_2025_upstream(self, tmp_path: Path) -> None:
        """The reference servers' case: the upstream speaks 2025-11-25 to the gateway, whose client
        speaks 2026-07-28, a schema without ``execution``; each tool's comes through unchanged."""

        async def scenario() -> None:
            direct = StdioServerParameters(
                command=sys.executable,
                args=[str(UPSTREAM)],
                env={**get_default_environment(), **inherited(), "RICH_EFFECTS": str(tmp_path)},
            )
            async with (
                Client(direct, mode="legacy") as plain,
                started(rich_config(tmp_path, mode="legacy"), tmp_path) as gateway,
                client(gateway) as gated,
            ):
                assert gated.protocol_version == "2026-07-28"
                upstream = {tool.name: wire(tool) for tool in (await plain.list_tools()).tools}
                through = {tool.name: wire(tool) for tool in (await gated.list_tools()).tools}
            assert through == upstream
            assert through["picture"]["execution"] == {"taskSupport": "forbidden"}

        run(scenario)


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_ANNOTATIONS = st.fixed_dictionaries(
    {},
    optional={
        "audience": st.lists(st.sampled_from(["user", "assistant"]), max_size=2, unique=True),
        "priority": st.floats(0, 1),
    },
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_BLOCK = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("text"), "text": _TEXT}, optional={"annotations": _ANNOTATIONS}
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("image"),
            "data": st.sampled_from(["aGk=", "AAEC", ""]),
            "mimeType": st.sampled_from(["image/png", "image/jpeg"]),
        },
        optional={"annotations": _ANNOTATIONS},
    ),
    st.fixed_dictionaries(
        {
            "type": st.just("resource"),
            "resource": st.fixed_dictionaries(
                {"uri": st.just("file:///r.txt"), "text": _TEXT},
                optional={"mimeType": st.just("text/plain")},
            ),
        }
    ),
    st.fixed_dictionaries(
        {"type": st.just("resource_link"), "uri": st.just("https://example.com/x"), "name": _TEXT}
    ),
)
RESULTS = st.fixed_dictionaries(
    {"content": st.lists(_BLOCK, max_size=4)},
    optional={
        "structuredContent": st.dictionaries(_TEXT, _JSON, max_size=4),
        "isError": st.booleans(),
    },
)


class TestAnyResult:
    """Whatever result the upstream sends, the gateway's client receives what a direct one does."""

    @settings(
        max_examples=4,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(results=st.lists(RESULTS, min_size=1, max_size=8))
    def test_results_equal_the_direct_call(
        self, tmp_path: Path, results: list[dict[str, Any]]
    ) -> None:
        """Generated content blocks, annotations, structured JSON and error flags, call by call."""

        async def scenario() -> None:
            async with both(tmp_path) as (plain, gated, _):
                for index, result in enumerate(results):
                    sent = {**result, "_meta": {"example.com/i": index}}
                    text = {"result": json.dumps(sent)}
                    direct = await plain.call_tool("echo_result", text)
                    through = await gated.call_tool("echo_result", text)
                    assert wire(through) == wire(direct), sent
                    said = verdict(through)
                    assert said["upstream"] is True
                    assert said["ok"] is (not result.get("isError", False))

        run(scenario)
