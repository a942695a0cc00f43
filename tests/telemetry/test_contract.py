"""The span contract: docs, constants and what the shop domain actually emits agree."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

import telemetry
from guard.testing import ManualClock
from telemetry import attributes, configure

from .conftest import KEY, read_spans
from .shop_paths import build_guard, drive

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"
ROW = re.compile(r"^\| `([^`]+)` \| (string|bool|int|double|string\[\]) \| `(.*)` \| .+ \|$")


def documented() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3).replace("\\|", "|"))
    return rows


def isort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then the rest."""
    if name.isupper():
        return (0, name)
    return (1, name) if name[:1].isupper() else (2, name)


@pytest.fixture(scope="module")
def shop_spans(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = tmp_path_factory.mktemp("contract")
    handle = configure(trail_dir=directory, masking_key=KEY, capture_content=True)
    clock = ManualClock()
    guard, backend = build_guard(handle.observer, clock)
    drive(guard, backend, clock)
    handle.shutdown()
    return read_spans(directory)


NOT_FROM_THE_SHOP = {
    attributes.TEXT_REPLACED,  # only on text UTF-8 cannot carry: tests/telemetry/test_hostile.py
    # decided up front for the guard's warnings, shadow mode and mid-session authentication
    # (issue 11); the shop run emits them once the guard reports them
    attributes.WARNINGS,
    attributes.WARNING_CODES,
    attributes.SHADOW,
    attributes.SHADOW_CODE,
    attributes.PRINCIPAL_PREVIOUS,
    attributes.AUTHENTICATED,
    # argument-level taint (issue 20): the shop declares no sinks;
    # tests/telemetry/test_provenance_spans.py emits them
    attributes.PROVENANCE_FIELD,
    attributes.PROVENANCE_VALUE,
    attributes.PROVENANCE_SOURCE_TOOL,
    attributes.PROVENANCE_SOURCE_STEP,
}


class TestDocs:
    def test_doc_lists_exactly_the_constants(self) -> None:
        """docs/telemetry.md has one row per contract attribute, with the same type and example."""
        contract = {
            attribute.name: (attribute.type, attribute.example)
            for attribute in (
                *attributes.CALL_ATTRIBUTES,
                *attributes.STAGE_ATTRIBUTES,
                *attributes.EVENT_ATTRIBUTES,
                *attributes.SETTLEMENT_ATTRIBUTES,
                *attributes.CHAIN_ATTRIBUTES,
            )
        }
        assert documented() == contract

    def test_every_name_constant_is_in_the_contract(self) -> None:
        """Each attribute-name constant appears in one of the contract tuples."""
        names = {
            attribute.name
            for attribute in (
                *attributes.CALL_ATTRIBUTES,
                *attributes.STAGE_ATTRIBUTES,
                *attributes.EVENT_ATTRIBUTES,
                *attributes.SETTLEMENT_ATTRIBUTES,
                *attributes.CHAIN_ATTRIBUTES,
            )
        }
        not_names = {"CALL_SPAN_PREFIX", "STAGE_SPAN_PREFIX", "OPERATION_EXECUTE_TOOL",
                     "INSTRUMENTATION_SCOPE", "RETRY_EVENT", "SETTLED_SPAN"}  # fmt: skip
        constants = {
            getattr(attributes, name)
            for name in attributes.__all__
            if name.isupper()
            and isinstance(getattr(attributes, name), str)
            and name not in not_names
        }
        assert constants == names


class TestPublicSurface:
    @pytest.mark.parametrize("module", [telemetry, attributes])
    def test_all_is_sorted_and_complete(self, module: Any) -> None:
        """`__all__` is sorted and names exactly what the module exports."""
        assert list(module.__all__) == sorted(module.__all__, key=isort_key)
        for name in module.__all__:
            assert hasattr(module, name)

    def test_init_only_reexports(self) -> None:
        """telemetry/__init__.py holds imports, `__all__` and the lazy map, nothing else."""
        tree = ast.parse(Path(telemetry.__file__).read_text())
        body = [node for node in tree.body if not isinstance(node, ast.Expr)]  # the docstring
        kinds = ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign | ast.If | ast.FunctionDef
        assert all(isinstance(node, kinds) for node in body)
        functions = [node.name for node in body if isinstance(node, ast.FunctionDef)]
        assert functions == ["__getattr__", "__dir__"]

    def test_lazy_names_resolve_to_their_modules(self) -> None:
        """Every name in `__all__` is the object its home module defines."""
        import importlib

        for name in telemetry.__all__:
            home = telemetry._HOME[name]
            assert getattr(telemetry, name) is getattr(importlib.import_module(home), name)


class TestEmitted:
    def test_every_emitted_attribute_is_documented(self, shop_spans: list[dict[str, Any]]) -> None:
        """Running the shop emits no attribute the contract does not document."""
        docs = documented()
        emitted = {key for span in shop_spans for key in span["attrs"]}
        events = {
            item["key"] for span in shop_spans for event in span.get("events", [])
            for item in event.get("attributes", [])
        }  # fmt: skip
        assert emitted | events <= set(docs)

    def test_every_documented_attribute_is_emitted(self, shop_spans: list[dict[str, Any]]) -> None:
        """Every code path of the shop together emits every documented attribute."""
        call_keys = {
            key for span in shop_spans if span["name"].startswith("execute_tool ")
            for key in span["attrs"]
        }  # fmt: skip
        stage_keys = {
            key for span in shop_spans if span["name"].startswith("guard.") for key in span["attrs"]
        }
        event_keys = {
            item["key"] for span in shop_spans for event in span.get("events", [])
            for item in event.get("attributes", [])
        }  # fmt: skip
        assert {a.name for a in attributes.CALL_ATTRIBUTES} - NOT_FROM_THE_SHOP == call_keys
        assert {a.name for a in attributes.STAGE_ATTRIBUTES} == stage_keys
        assert {a.name for a in attributes.EVENT_ATTRIBUTES} == event_keys

    def test_types_match_the_contract(self, shop_spans: list[dict[str, Any]]) -> None:
        """Each emitted value has the documented OTLP type."""
        python = {"string": str, "bool": bool, "int": int, "double": float, "string[]": list}
        types = {
            a.name: python[a.type]
            for a in (*attributes.CALL_ATTRIBUTES, *attributes.STAGE_ATTRIBUTES)
        }
        for span in shop_spans:
            for key, value in span["attrs"].items():
                assert type(value) is types[key], (key, value)

    def test_every_stage_emits_its_span(self, shop_spans: list[dict[str, Any]]) -> None:
        """Each stage of the pipeline shows up as a `guard.<stage>` span."""
        names = {span["name"] for span in shop_spans}
        for stage in ("budget", "resolve", "parse", "schema", "idempotency", "rules", "policy",
                      "confirm", "execute"):  # fmt: skip
            assert f"guard.{stage}" in names

    def test_every_code_reached_is_on_a_span(self, shop_spans: list[dict[str, Any]]) -> None:
        """The codes the shop run produced all appear as `guard.code` on call spans."""
        codes = {
            span["attrs"]["guard.code"]
            for span in shop_spans
            if span["name"].startswith("execute_tool ")
        }
        assert {"OK", "INVALID_ARGUMENTS", "TAINTED_CONTEXT", "CONFIRMATION_REQUIRED",
                "CONFIRMATION_DENIED", "CONFIRMATION_EXPIRED", "UPSTREAM_UNAVAILABLE"} <= codes  # fmt: skip


class TestStageOrder:
    def test_contract_stages_are_the_guards_chain(self) -> None:
        """The span contract's stage list is the guard's default chain, in order."""
        from guard.shop import build_shop
        from telemetry import attributes

        assert tuple(stage.name for stage in build_shop().guard.stages) == attributes.STAGES
