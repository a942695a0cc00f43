"""Stage 6: per-request and daily limits in code, and capability separation after untrusted content."""

from __future__ import annotations

import json

from guard.shop import Order, ShopApp, build_shop, default_orders
from guard.testing import ManualClock
from tests.guard.conftest import approved_refund, order_args, refund_args


class TestLimits:
    def test_per_request_limit(self, shop: ShopApp) -> None:
        """A customer's refund above the per-request cap is POLICY_LIMIT, before any human is asked."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        result = session.execute("refund_order", refund_args(amount_cents=12_000))
        assert result.code == "POLICY_LIMIT"
        assert result.approval_id is None
        assert shop.backend.side_effects == 0

    def test_staff_have_higher_limits(self, shop: ShopApp) -> None:
        """The same refund is within an internal agent's limits (it then waits for a human)."""
        session = shop.session("s1", "AGENT-1", role="support_agent")
        session.execute("get_order", order_args())
        result = session.execute("refund_order", refund_args(amount_cents=12_000))
        assert result.code == "CONFIRMATION_REQUIRED"

    def test_daily_limit_per_principal_and_currency(self, clock: ManualClock) -> None:
        """Refunds add up per principal per day; the one that would pass the cap is refused, tomorrow it passes."""
        extra = Order(order_id="ORD-1010", customer_id="CUS-1", amount_cents=20_000, currency="BRL")
        shop = build_shop(clock=clock, orders=[*default_orders(), extra])
        first = approved_refund(shop, "s1", amount_cents=10_000)
        second = approved_refund(shop, "s2", order_id="ORD-1010", amount_cents=4_000)
        session = shop.session("s3", "CUS-1")
        session.execute("get_order", order_args("ORD-1010"))
        third = session.execute("refund_order", refund_args("ORD-1010", amount_cents=2_000))
        clock.advance(86_400)
        session.next_turn()
        fourth = session.execute("refund_order", refund_args("ORD-1010", amount_cents=2_000))
        assert (first.code, second.code, third.code) == ("OK", "OK", "POLICY_LIMIT")
        assert fourth.code == "CONFIRMATION_REQUIRED"
        assert shop.backend.side_effects == 2

    def test_daily_limit_is_rechecked_at_execution(self, clock: ManualClock) -> None:
        """Two approvals pending at once cannot together pass the daily cap: the second is refused at execute."""
        extra = Order(order_id="ORD-1010", customer_id="CUS-1", amount_cents=20_000, currency="BRL")
        shop = build_shop(clock=clock, orders=[*default_orders(), extra])
        one, two = shop.session("s1", "CUS-1"), shop.session("s2", "CUS-1")
        one.execute("get_order", order_args())
        two.execute("get_order", order_args("ORD-1010"))
        a = one.execute("refund_order", refund_args(amount_cents=9_000))
        b = two.execute("refund_order", refund_args("ORD-1010", amount_cents=8_000))
        assert a.approval_id and b.approval_id
        results = [
            shop.guard.approve(a.approval_id, by="h"),
            shop.guard.approve(b.approval_id, by="h"),
        ]
        assert [r.code for r in results] == ["OK", "POLICY_LIMIT"]
        assert shop.backend.side_effects == 1


class TestTaint:
    def test_tainted_session_is_refused_a_refund(self, shop: ShopApp) -> None:
        """After untrusted policy text, a refund is TAINTED_CONTEXT and only a human can let it run."""
        session = shop.session("s1", "CUS-1")
        hits = session.execute("search_refund_policy", json.dumps({"query": "partial refunds"}))
        assert hits.ok and "ignore previous instructions" in json.dumps(hits.data)
        session.execute("get_order", order_args("ORD-1002"))
        session.execute("get_order", order_args())
        result = session.execute("refund_order", refund_args())
        assert result.code == "TAINTED_CONTEXT"
        assert shop.backend.side_effects == 0
        assert result.approval_id is not None
        approved = shop.guard.approve(result.approval_id, by="agent-7")
        assert approved.ok and shop.backend.side_effects == 1

    def test_reads_stay_allowed_when_tainted(self, shop: ShopApp) -> None:
        """Capability separation only blocks writes."""
        session = shop.session("s1", "CUS-1")
        session.execute("search_refund_policy", json.dumps({"query": "damaged"}))
        assert session.execute("get_order", order_args()).ok

    def test_taint_is_per_session(self, shop: ShopApp) -> None:
        """Another session of the same customer is not tainted."""
        shop.session("s1", "CUS-1").execute(
            "search_refund_policy", json.dumps({"query": "damaged"})
        )
        session = shop.session("s2", "CUS-1")
        session.execute("get_order", order_args())
        assert session.execute("refund_order", refund_args()).code == "CONFIRMATION_REQUIRED"
