"""Stage 3: strict schemas, and problems the model can act on."""

from __future__ import annotations

import json
from typing import Any

import pytest

from guard.shop import ShopApp
from tests.guard.conftest import order_args, refund_args


def refund(shop: ShopApp, raw: str) -> Any:
    session = shop.session("s1", "CUS-1")
    session.execute("get_order", order_args())
    return session.execute("refund_order", raw)


class TestStrictness:
    @pytest.mark.parametrize(
        ("amount", "rule"),
        [
            ("2590", "int_type"),
            (25.9, "int_type"),
            (25.0, "int_type"),
            (-100, "greater_than"),
            (0, "greater_than"),
            (True, "int_type"),
            (None, "int_type"),
        ],
    )
    def test_amount_is_a_positive_integer_in_cents(
        self, shop: ShopApp, amount: Any, rule: str
    ) -> None:
        """No coercion: strings, decimals, booleans and non-positive amounts are refused, with the unit hint."""
        result = refund(shop, refund_args(amount_cents=amount))
        assert result.code == "INVALID_ARGUMENTS"
        (problem,) = result.data["problems"]
        assert problem["path"] == "/amount_cents"
        assert problem["rule"] == rule
        assert "2590" in problem["hint"]
        assert shop.backend.side_effects == 0

    def test_invented_enum_value(self, shop: ShopApp) -> None:
        """An enum value the schema does not have lists the allowed ones."""
        result = refund(shop, refund_args(reason="CUSTOMER_UPSET"))
        (problem,) = result.data["problems"]
        assert problem["path"] == "/reason"
        assert problem["rule"] == "literal_error"
        assert "customer_request" in problem["expected"]
        assert problem["got"] == '"CUSTOMER_UPSET"'

    def test_malformed_id(self, shop: ShopApp) -> None:
        """Ids must match their pattern."""
        result = shop.session("s1", "CUS-1").execute("get_order", order_args("1001"))
        (problem,) = result.data["problems"]
        assert (problem["path"], problem["rule"]) == ("/order_id", "string_pattern_mismatch")
        assert shop.backend.requests == 0

    def test_extra_field_forbidden(self, shop: ShopApp) -> None:
        """A helpful extra field such as force: true is an error, not ignored."""
        result = refund(shop, refund_args(force=True))
        (problem,) = result.data["problems"]
        assert (problem["path"], problem["rule"]) == ("/force", "extra_forbidden")

    def test_missing_field(self, shop: ShopApp) -> None:
        """A required field is required; the model is told to ask rather than guess."""
        raw = json.dumps({"order_id": "ORD-1001", "amount_cents": 2590, "reason": "damaged"})
        result = refund(shop, raw)
        (problem,) = result.data["problems"]
        assert (problem["path"], problem["rule"], problem["got"]) == (
            "/currency",
            "missing",
            "nothing",
        )
        assert "ask" in result.message

    def test_every_problem_is_listed(self, shop: ShopApp) -> None:
        """Several problems come back together, each with path, rule, expected and got."""
        raw = json.dumps({"order_id": "X", "amount_cents": "10", "currency": "EUR", "extra": 1})
        result = refund(shop, raw)
        paths = sorted(p["path"] for p in result.data["problems"])
        assert paths == ["/amount_cents", "/currency", "/extra", "/order_id", "/reason"]
        assert all({"path", "rule", "expected", "got"} <= set(p) for p in result.data["problems"])

    def test_got_is_truncated(self, shop: ShopApp) -> None:
        """A long rejected value is echoed only in part."""
        result = shop.session("s1", "CUS-1").execute(
            "search_refund_policy", json.dumps({"query": "x" * 500})
        )
        (problem,) = result.data["problems"]
        assert len(problem["got"]) <= 40

    def test_formatting_does_not_change_the_call(self, shop: ShopApp) -> None:
        """Whitespace and key order give the same canonical call: the second is the same pending action."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        first = session.execute("refund_order", refund_args())
        raw = '{ "reason":"damaged", "currency" : "BRL", "amount_cents" : 2590, "order_id":"ORD-1001" }'
        second = session.execute("refund_order", raw)
        assert first.approval_id == second.approval_id is not None
