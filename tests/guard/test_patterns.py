"""Argument patterns mean the same to the validator and to the published JSON Schema."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from guard import ConfigurationError, ToolContext, tool
from guard.patterns import ambiguous_constructs, schema_patterns
from guard.shop import build_shop, shop_tools
from guard.shop.backend import ShopBackend
from guard.testing import ManualClock

LOOKALIKE_DIGITS = [
    chr(c)
    for c in range(sys.maxunicode + 1)
    if unicodedata.decimal(chr(c), None) is not None and not chr(c).isascii()
]
"""Every non-ASCII decimal digit (fullwidth, Arabic-Indic, Devanagari, Bengali, ...): Rust's and
Python's Unicode ``\\d`` match them all; ECMA-262's ``\\d`` matches none."""

digit_or_lookalike = st.sampled_from("0123456789") | st.sampled_from(LOOKALIKE_DIGITS)


def ecma_match(pattern: str, text: str) -> bool:
    """JSON Schema semantics for these patterns: ECMA-262 classes are ASCII (Python's re.ASCII)."""
    return re.search(pattern, text, re.ASCII) is not None


class TestLookalikeDigits:
    """The shop's ids accept exactly what its published schema accepts."""

    def test_there_are_many_lookalikes(self) -> None:
        """The test covers the whole class, not three examples."""
        assert {"\uff11", "\u0661", "\u0967"} <= set(LOOKALIKE_DIGITS) and len(
            LOOKALIKE_DIGITS
        ) > 600

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(digit_or_lookalike, min_size=4, max_size=4).map("".join))
    def test_runtime_agrees_with_the_published_schema(self, digits: str) -> None:
        """Whatever digits an order id is spelt with, validation and the schema give one answer."""
        shop = build_shop(clock=ManualClock())
        order_id = "ORD-" + digits
        pattern = shop.guard.registry["get_order"].json_schema["properties"]["order_id"]["pattern"]
        result = shop.session("s1", "CUS-1").execute("get_order", {"order_id": order_id})
        accepted = result.code != "INVALID_ARGUMENTS"
        assert accepted == ecma_match(pattern, order_id)
        assert accepted == digits.isascii()
        if not digits.isascii():
            assert shop.backend.requests == 0

    def test_a_lookalike_refund_changes_nothing(self) -> None:
        """A refund for a fullwidth ORD-1001 is refused before anything runs."""
        shop = build_shop(clock=ManualClock())
        session = shop.session("s1", "CUS-1")
        raw = (
            '{"order_id": "ORD-\\uff11\\uff10\\uff10\\uff11", "amount_cents": 100,'
            ' "currency": "BRL", "reason": "damaged"}'
        )
        assert session.execute("refund_order", raw).code == "INVALID_ARGUMENTS"
        assert shop.backend.side_effects == 0 and shop.backend.requests == 0

    def test_no_shop_tool_has_an_ambiguous_pattern(self) -> None:
        """Every pattern in every shop schema is engine-independent (a build would fail otherwise)."""
        specs = shop_tools(ShopBackend.with_orders(), ManualClock())
        patterns = [p for spec in specs for _, p in schema_patterns(spec.json_schema)]
        assert patterns and not any(ambiguous_constructs(p) for p in patterns)


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(pattern=r"^\w+$")


def declare(annotation: object, **field: object) -> None:
    """Declare a tool whose argument model has one field ``x``."""
    model = type(
        "Args",
        (BaseModel,),
        {
            "__annotations__": {"x": annotation},
            "model_config": ConfigDict(extra="forbid"),
            "x": Field(**field),  # type: ignore[call-overload]
        },
    )

    @tool(arguments=model)
    def probe(args: BaseModel, ctx: ToolContext) -> None:
        """Probe."""


class TestAmbiguousPatternsAreRefused:
    """A spec whose patterns two engines read differently does not build."""

    @pytest.mark.parametrize(
        ("pattern", "hint"),
        [
            (r"^ORD-\d{4}$", "[0-9]"),
            (r"^\D+$", "[^0-9]"),
            (r"^\w+$", "[A-Za-z0-9_]"),
            (r"^a\sb$", "[ \\t"),
            (r"\bword\b", "boundary"),
            (r"^\p{L}+$", "ASCII class"),
            (r"(?i)^abc$", "inline flags"),
            (r"^[\d-]+$", "[0-9]"),
        ],
    )
    def test_refused_with_the_ascii_spelling(self, pattern: str, hint: str) -> None:
        """The error names the pattern and says what to write instead."""
        with pytest.raises(ConfigurationError) as raised:
            declare(str, pattern=pattern)
        assert repr(pattern) in str(raised.value) and hint in str(raised.value)

    def test_nested_models_are_checked(self) -> None:
        """A pattern inside a nested model ($defs) is found as well."""
        with pytest.raises(ConfigurationError, match=r"\$defs/Inner"):
            declare(Inner)

    @pytest.mark.parametrize(
        "pattern", [r"^ORD-[0-9]{4}$", r"^\\d$", r"^(?:ab)+(c)$", r"^\.\-\[\]$"]
    )
    def test_engine_independent_patterns_build(self, pattern: str) -> None:
        """ASCII ranges, an escaped backslash before d, and plain groups are fine."""
        declare(str, pattern=pattern)
