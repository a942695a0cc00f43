"""Stage 7: human confirmation held server-side, bound to what was shown."""

from __future__ import annotations

import pytest

from guard import ApprovalNotFound
from guard.shop import ShopApp
from guard.stores import ApprovalState
from guard.testing import ManualClock
from tests.guard.conftest import order_args, refund_args


def propose(shop: ShopApp, **kwargs: object) -> str:
    session = shop.session("s1", "CUS-1")
    session.execute("get_order", order_args())
    result = session.execute("refund_order", refund_args(**kwargs))  # type: ignore[arg-type]
    assert result.code == "CONFIRMATION_REQUIRED"
    assert result.approval_id is not None
    return result.approval_id


class TestConfirmation:
    def test_required_holds_the_action(self, shop: ShopApp) -> None:
        """A refund waits: nothing happens, and the pending action holds exactly the validated arguments."""
        approval_id = propose(shop)
        action = shop.guard.pending(approval_id)
        assert shop.backend.side_effects == 0
        assert action is not None and action.state is ApprovalState.PENDING
        assert (
            action.arguments
            == '{"order_id":"ORD-1001","amount_cents":2590,"currency":"BRL","reason":"damaged"}'
        )

    def test_approved_runs_once(self, shop: ShopApp) -> None:
        """Approval resumes the call; it runs under a key derived from the approval."""
        approval_id = propose(shop)
        result = shop.guard.approve(approval_id, by="agent-7")
        assert result.ok and result.approval_id == approval_id
        assert result.idempotency_key is not None and result.idempotency_key.startswith("a_")
        assert shop.backend.side_effects == 1
        assert shop.backend.orders["ORD-1001"].refunded_cents == 2590

    def test_denied(self, shop: ShopApp) -> None:
        """A denial ends CONFIRMATION_DENIED and nothing runs, also when approved afterwards."""
        approval_id = propose(shop)
        denied = shop.guard.deny(approval_id, by="agent-7")
        late = shop.guard.approve(approval_id, by="agent-8")
        assert denied.code == late.code == "CONFIRMATION_DENIED"
        assert shop.backend.side_effects == 0

    def test_expired(self, shop: ShopApp, clock: ManualClock) -> None:
        """An approval after the window closed is CONFIRMATION_EXPIRED and nothing runs."""
        approval_id = propose(shop)
        clock.advance(shop.guard.policy.confirmation_ttl + 1)
        result = shop.guard.approve(approval_id, by="agent-7")
        assert result.code == "CONFIRMATION_EXPIRED"
        assert shop.backend.side_effects == 0

    def test_a_new_proposal_after_expiry_gets_a_new_approval(
        self, shop: ShopApp, clock: ManualClock
    ) -> None:
        """Once expired, proposing again opens a fresh pending action."""
        first = propose(shop)
        clock.advance(shop.guard.policy.confirmation_ttl + 1)
        session = shop.session("s1", "CUS-1")
        session.next_turn()
        again = session.execute("refund_order", refund_args())
        assert again.code == "CONFIRMATION_REQUIRED" and again.approval_id != first

    def test_approved_after_the_order_changed(self, shop: ShopApp) -> None:
        """Rules run again on approval: an order refunded meanwhile refuses the approved refund."""
        approval_id = propose(shop, amount_cents=9_000)
        shop.backend.orders["ORD-1001"].refunded_cents = 5_000
        result = shop.guard.approve(approval_id, by="agent-7")
        assert result.code == "AMOUNT_EXCEEDS_REFUNDABLE"
        assert shop.backend.side_effects == 0

    def test_the_approval_is_bound_to_what_was_shown(self, shop: ShopApp) -> None:
        """A pending action whose arguments were altered in the store does not run."""
        approval_id = propose(shop)
        store = shop.guard.env.approvals
        action = store.get(approval_id)
        assert action is not None
        from dataclasses import replace

        forged = replace(
            action, id="apr_forged", arguments=action.arguments.replace("2590", "9999")
        )
        store.create(forged)
        result = shop.guard.approve("apr_forged", by="agent-7")
        assert result.code == "CONFIRMATION_DENIED"
        assert shop.backend.side_effects == 0

    def test_unknown_approval(self, shop: ShopApp) -> None:
        """The host naming an unknown approval id is a host error, raised."""
        with pytest.raises(ApprovalNotFound):
            shop.guard.approve("apr_nope", by="agent-7")

    def test_model_cannot_approve(self, shop: ShopApp) -> None:
        """Arguments claiming approval are extra fields: refused, nothing runs."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        result = session.execute("refund_order", refund_args(approved=True, approval_id="apr_x"))
        assert result.code == "INVALID_ARGUMENTS"
        assert shop.backend.side_effects == 0

    def test_reads_need_no_confirmation(self, shop: ShopApp) -> None:
        """Reads never wait for a human."""
        assert shop.session("s1", "CUS-1").execute("get_refund_status", order_args()).ok
