"""Stage 5: existence, ownership, currency, refundable amount, state, prerequisites."""

from __future__ import annotations

from guard.shop import ShopApp
from tests.guard.conftest import order_args, refund_args


class TestOwnership:
    def test_foreign_and_missing_orders_look_the_same(self, shop: ShopApp) -> None:
        """NOT_FOUND with the same message shape for a foreign and a missing order: no enumeration oracle."""
        session = shop.session("s1", "CUS-1")
        foreign = session.execute("get_order", order_args("ORD-1002"))
        missing = session.execute("get_order", order_args("ORD-9002"))
        assert foreign.code == missing.code == "NOT_FOUND"
        assert foreign.message.replace("1002", "9002") == missing.message
        assert foreign.data == missing.data is None

    def test_refund_checks_ownership_against_current_state(self, shop: ShopApp) -> None:
        """A refund of an order that became foreign, or vanished, after the read is NOT_FOUND, worded alike."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args("ORD-1001"))
        session.execute("get_order", order_args("ORD-1003"))
        shop.backend.orders["ORD-1001"].customer_id = "CUS-2"
        del shop.backend.orders["ORD-1003"]
        foreign = session.execute("refund_order", refund_args("ORD-1001", 100))
        missing = session.execute("refund_order", refund_args("ORD-1003", 100))
        assert foreign.code == missing.code == "NOT_FOUND"
        assert foreign.message.replace("1001", "1003") == missing.message
        assert shop.backend.side_effects == 0

    def test_staff_roles_see_every_order(self, shop: ShopApp) -> None:
        """An internal support agent may look up any customer's order."""
        result = shop.session("s1", "AGENT-1", role="support_agent").execute(
            "get_order", order_args("ORD-1002")
        )
        assert result.ok


class TestPrerequisite:
    def test_refund_needs_a_prior_get_order_of_that_order(self, shop: ShopApp) -> None:
        """Without get_order of the same order in this session, the refund is refused and says what to do."""
        session = shop.session("s1", "CUS-1")
        result = session.execute("refund_order", refund_args())
        session.execute("get_order", order_args("ORD-1003"))
        other = session.execute("refund_order", refund_args())
        assert result.code == other.code == "PREREQUISITE_MISSING"
        assert "get_order" in result.message
        assert shop.backend.side_effects == 0

    def test_a_failed_read_does_not_count(self, shop: ShopApp) -> None:
        """A get_order that returned NOT_FOUND does not satisfy the prerequisite."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args("ORD-1002"))
        assert (
            session.execute("refund_order", refund_args("ORD-1002", 100, "USD")).code
            == "PREREQUISITE_MISSING"
        )

    def test_prerequisites_belong_to_the_session(self, shop: ShopApp) -> None:
        """A read in one session does not unlock a write in another."""
        shop.session("s1", "CUS-1").execute("get_order", order_args())
        result = shop.session("s2", "CUS-1").execute("refund_order", refund_args())
        assert result.code == "PREREQUISITE_MISSING"


class TestBusinessRules:
    def _propose(self, shop: ShopApp, raw: str, order_id: str = "ORD-1001") -> str:
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args(order_id))
        return str(session.execute("refund_order", raw).code)

    def test_currency_mismatch(self, shop: ShopApp) -> None:
        """USD for an order paid in BRL is CURRENCY_MISMATCH."""
        assert self._propose(shop, refund_args(currency="USD")) == "CURRENCY_MISMATCH"

    def test_over_refund(self, shop: ShopApp) -> None:
        """More than the refundable amount is AMOUNT_EXCEEDS_REFUNDABLE."""
        assert (
            self._propose(shop, refund_args("ORD-1003", 2591), "ORD-1003")
            == "AMOUNT_EXCEEDS_REFUNDABLE"
        )

    def test_state_does_not_allow_it(self, shop: ShopApp) -> None:
        """A pending order cannot be refunded: INVALID_STATE."""
        raw = refund_args("ORD-1004", 100, "USD")
        assert self._propose(shop, raw, "ORD-1004") == "INVALID_STATE"

    def test_rules_run_before_confirmation(self, shop: ShopApp) -> None:
        """A call that would fail its rules never creates a pending approval."""
        assert self._propose(shop, refund_args(currency="USD")) == "CURRENCY_MISMATCH"
        assert shop.backend.side_effects == 0
        store = shop.guard.env.approvals
        assert store.find_pending("anything", now=0) is None
