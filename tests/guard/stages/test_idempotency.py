"""Stage 4: replays, loop guards, in-flight twins."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import (
    Code,
    ConfigurationError,
    Effect,
    Guard,
    Policy,
    Principal,
    Risk,
    RolePolicy,
    ToolContext,
    tool,
)
from guard.shop import ShopApp
from guard.testing import ManualClock
from tests.guard.conftest import approved_refund, make_shop, order_args, refund_args


class TestReplay:
    def test_repeated_write_is_replayed(self, shop: ShopApp) -> None:
        """The same refund proposed again after it ran returns the original result, no second refund."""
        done = approved_refund(shop)
        again = shop.session("s1", "CUS-1").execute("refund_order", refund_args())
        assert done.ok and not done.replayed
        assert again.ok and again.replayed
        assert again.data == done.data
        assert shop.backend.side_effects == 1

    def test_a_repeat_of_an_approved_proposal_names_the_key_the_backend_got(
        self, shop: ShopApp
    ) -> None:
        """The replay of an approved, executed proposal carries the approval's key, not the
        proposal's: the key the handler sent the backend, so its status can be looked up by it."""
        done = approved_refund(shop)
        again = shop.session("s1", "CUS-1").execute("refund_order", refund_args())
        assert again.replayed and again.ok
        assert done.idempotency_key is not None and done.idempotency_key.startswith("a_")
        assert again.idempotency_key == done.idempotency_key
        assert shop.backend.side_effects == 1

    def test_approving_twice_replays(self, shop: ShopApp) -> None:
        """A second approval of the same action replays; the backend is not called again."""
        done = approved_refund(shop)
        assert done.approval_id is not None
        twice = shop.guard.approve(done.approval_id, by="agent-8")
        assert twice.replayed and twice.data == done.data
        assert shop.backend.side_effects == 1

    def test_concurrent_identical_proposal_is_in_progress(
        self, shop: ShopApp, clock: ManualClock
    ) -> None:
        """A proposal whose key another caller holds is refused IN_PROGRESS before rules run."""
        from guard.stages.idempotency import proposal_key

        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        probe = session.execute("refund_order", refund_args())
        assert probe.code == "CONFIRMATION_REQUIRED"
        canonical = (
            '{"order_id":"ORD-1001","amount_cents":2590,"currency":"BRL","reason":"damaged"}'
        )
        key = proposal_key("s1", "refund_order", canonical)
        from guard.stages.base import digest

        fingerprint = digest("refund_order", canonical)
        shop.guard.env.idempotency.claim(key, fingerprint, now=clock.now(), lease=60)
        assert session.execute("refund_order", refund_args()).code == "IN_PROGRESS"

    def test_an_answer_while_a_twin_runs_says_the_outcome_is_unknown(
        self, shop: ShopApp, clock: ManualClock
    ) -> None:
        """IN_PROGRESS is about an attempt that may still apply the write: its outcome is
        ``unknown`` (with the holder's key, so its status can be looked up), never
        ``not_applied``, on every repeat within the lease; nothing runs meanwhile."""
        from guard.stages.base import digest
        from guard.stages.idempotency import proposal_key

        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        canonical = (
            '{"order_id":"ORD-1001","amount_cents":2590,"currency":"BRL","reason":"damaged"}'
        )
        key = proposal_key("s1", "refund_order", canonical)
        fingerprint = digest("refund_order", canonical)
        shop.guard.env.idempotency.claim(key, fingerprint, now=clock.now(), lease=60)
        answers = []
        for _ in range(3):
            answers.append(session.execute("refund_order", refund_args()))
            clock.advance(10)
        assert {(a.code, a.outcome, a.idempotency_key) for a in answers} == {
            ("IN_PROGRESS", "unknown", key)
        }
        payload = answers[0].for_model()
        assert (payload["outcome"], payload["idempotency_key"]) == ("unknown", key)
        assert shop.backend.side_effects == 0


class TestLoops:
    def test_identical_reads_beyond_the_limit(self, clock: ManualClock) -> None:
        """The fourth identical read is LOOP_DETECTED and tells the model to use the previous result."""
        shop = make_shop(clock, max_identical_calls=3)
        session = shop.session("s1", "CUS-1")
        codes = [session.execute("get_order", order_args()).code for _ in range(4)]
        assert codes == ["OK", "OK", "OK", "LOOP_DETECTED"]
        assert shop.backend.requests == 3

    def test_loops_count_canonical_calls(self, clock: ManualClock) -> None:
        """Reformatted copies of a call count as the same call."""
        shop = make_shop(clock, max_identical_calls=1)
        session = shop.session("s1", "CUS-1")
        assert session.execute("get_order", '{"order_id":"ORD-1001"}').ok
        assert (
            session.execute("get_order", '{ "order_id" : "ORD-1001" }').code == Code.LOOP_DETECTED
        )

    def test_repeated_writes_beyond_the_limit(self, clock: ManualClock) -> None:
        """A write repeated past the limit is a loop, and still no second side effect."""
        shop = make_shop(clock, max_identical_calls=2)
        done = approved_refund(shop)
        session = shop.session("s1", "CUS-1")
        again = [session.execute("refund_order", refund_args()).code for _ in range(2)]
        assert done.ok
        assert again == ["OK", "LOOP_DETECTED"]
        assert shop.backend.side_effects == 1


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    request_id: str
    amount_cents: int


class TestCallerChosenKeys:
    def _session(self, clock: ManualClock, effects: list[int]) -> Any:
        @tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.LOW, idempotency_field="request_id")
        def pay(args: Payment, ctx: ToolContext) -> dict[str, int]:
            """Pay."""
            effects.append(args.amount_cents)
            return {"paid": args.amount_cents}

        policy = Policy(roles={"u": RolePolicy(tools=frozenset({"pay"}))}, rate_limit=None)
        guard = Guard(tools=[pay], policy=policy, clock=clock)
        return guard.session("s1", Principal(id="U-1", role="u"))

    def test_same_request_id_other_arguments_is_a_conflict(self, clock: ManualClock) -> None:
        """A request id reused with another amount is IDEMPOTENCY_CONFLICT and pays nothing more."""
        effects: list[int] = []
        session = self._session(clock, effects)
        first = session.execute("pay", '{"request_id": "r-1", "amount_cents": 500}')
        other = session.execute("pay", '{"request_id": "r-1", "amount_cents": 900}')
        assert first.ok and other.code == "IDEMPOTENCY_CONFLICT"
        assert effects == [500]

    def test_same_request_id_same_arguments_replays(self, clock: ManualClock) -> None:
        """The same request id with the same arguments is a replay."""
        effects: list[int] = []
        session = self._session(clock, effects)
        session.execute("pay", '{"request_id": "r-1", "amount_cents": 500}')
        again = session.execute("pay", '{ "amount_cents": 500, "request_id": "r-1" }')
        assert again.replayed and effects == [500]

    def test_unknown_field_is_a_configuration_error(self) -> None:
        """Naming a field the model does not have fails when the tool is declared."""
        with pytest.raises(ConfigurationError):
            tool(arguments=Payment, effect=Effect.WRITE, idempotency_field="nope")(
                lambda a, c: None
            )
