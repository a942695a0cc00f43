"""The retail scenario's spans: domain codes, per-refusal fixable, warnings, shadow, authentication."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from telemetry import attributes

SPANS = tuple[Path, dict[str, int]]


def call_spans(directory: Path) -> list[dict[str, Any]]:
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for resource in json.loads(line)["resourceSpans"]:
                for scope in resource.get("scopeSpans", []):
                    for span in scope["spans"]:
                        span["attrs"] = {
                            item["key"]: next(iter(item["value"].values()))
                            for item in span.get("attributes", [])
                        }
                        spans.append(span)
    return spans


def by_code(spans: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    """Enforced call spans with ``code`` (shadow spans are counted apart)."""
    return [
        s
        for s in spans
        if s["name"].startswith("execute_tool ")
        and s["attrs"][attributes.CODE] == code
        and not s["attrs"].get(attributes.SHADOW)
    ]


class TestRetailSpans:
    """Every new concept of issue 11 is on the spans, under the contract's names."""

    def test_a_domain_code_carries_its_stage_and_fixable(self, retail_trail: SPANS) -> None:
        """VARIANT_MISMATCH: guard.code, guard.code.stage rules, guard.fixable true."""
        (span,) = by_code(call_spans(retail_trail[0]), "VARIANT_MISMATCH")
        assert span["attrs"][attributes.CODE_STAGE] == "rules"
        assert span["attrs"][attributes.FIXABLE] is True
        assert span["attrs"][attributes.REJECTED_STAGE] == "rules"

    def test_fixable_per_refusal_reaches_the_span(self, retail_trail: SPANS) -> None:
        """PAYMENT_METHOD_UNUSABLE with no other method: guard.fixable false on call and stage span."""
        spans = call_spans(retail_trail[0])
        (span,) = by_code(spans, "PAYMENT_METHOD_UNUSABLE")
        assert span["attrs"][attributes.FIXABLE] is False
        (stage,) = [
            s for s in spans
            if s.get("parentSpanId") == span["spanId"] and s["attrs"].get(attributes.STAGE_OUTCOME) == "reject"
        ]  # fmt: skip
        assert stage["attrs"][attributes.STAGE_FIXABLE] is False

    def test_warnings_are_counted(self, retail_trail: SPANS) -> None:
        """The exchange that went through with SAME_ITEM says so."""
        (span,) = [
            s for s in by_code(call_spans(retail_trail[0]), "OK")
            if attributes.WARNINGS in s["attrs"]
        ]  # fmt: skip
        assert span["attrs"][attributes.WARNINGS] == "1" or span["attrs"][attributes.WARNINGS] == 1
        assert span["attrs"][attributes.WARNING_CODES]["values"] == [{"stringValue": "SAME_ITEM"}]

    def test_authentication_is_audited(self, retail_trail: SPANS) -> None:
        """The anonymous call says authenticated false; the lookup names the previous principal."""
        spans = call_spans(retail_trail[0])
        (anonymous,) = by_code(spans, "AUTH_REQUIRED")
        assert anonymous["attrs"][attributes.AUTHENTICATED] is False
        assert anonymous["attrs"][attributes.FIXABLE] is True
        lookups = [s for s in spans if attributes.PRINCIPAL_PREVIOUS in s["attrs"]]
        assert {s["attrs"][attributes.GEN_AI_TOOL_NAME] for s in lookups} == {
            "find_user_id_by_name_zip",
            "find_user_id_by_email",
        }
        for span in lookups:
            previous = span["attrs"][attributes.PRINCIPAL_PREVIOUS]
            assert previous.startswith("p_") and previous != span["attrs"][attributes.PRINCIPAL]
            assert span["attrs"][attributes.AUTHENTICATED] is True

    def test_shadow_says_shadow(self, retail_trail: SPANS) -> None:
        """The shadow exchange ran (ok) and its span says what the gate would have decided."""
        directory, effects = retail_trail
        spans = [s for s in call_spans(directory) if s["attrs"].get(attributes.SHADOW) is True]
        (span,) = spans
        assert span["attrs"][attributes.CODE] == "VARIANT_MISMATCH"
        assert span["attrs"][attributes.SHADOW_CODE] == "VARIANT_MISMATCH"
        assert (
            span["attrs"][attributes.OK] is True
            and span["attrs"][attributes.REJECTED_STAGE] == "rules"
        )
        assert effects == {"enforced": 1, "shadow": 1}

    def test_every_issue_11_attribute_is_emitted_and_documented(self, retail_trail: SPANS) -> None:
        """The attributes the shop cannot emit are emitted here, and the contract lists them."""
        emitted = {key for span in call_spans(retail_trail[0]) for key in span["attrs"]}
        names = {a.name for a in attributes.CALL_ATTRIBUTES}
        new = {
            attributes.WARNINGS,
            attributes.WARNING_CODES,
            attributes.SHADOW,
            attributes.SHADOW_CODE,
            attributes.PRINCIPAL_PREVIOUS,
            attributes.AUTHENTICATED,
            attributes.CODE_STAGE,
        }
        assert new <= emitted and new <= names
