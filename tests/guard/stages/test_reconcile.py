"""Stage 4 with a status check: unknown outcomes of writes settled by the tool's ``reconcile``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import Effect, Guard, Outcome, Policy, Principal, Risk, RolePolicy, ToolContext, tool
from guard.stages.base import digest
from guard.stages.idempotency import proposal_key
from guard.stores import MemoryIdempotencyStore
from guard.testing import ManualClock

PRINCIPAL = Principal(id="u1", role="agent", scopes=frozenset())
ARGS = {"account": "A1", "amount_cents": 500}


class Pay(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    amount_cents: int


@dataclass
class Backend:
    """A payments backend that does not deduplicate, and a status endpoint by key."""

    applied: list[str] = field(default_factory=list)
    fail: str = ""  # "after": the effect lands, the answer is lost; "before": nothing lands
    checks: int = 0
    check_says: Outcome | None = None  # None: the truth from ``applied``
    check_raises: bool = False

    def pay(self, key: str) -> dict[str, Any]:
        if self.fail == "before":
            raise TimeoutError("no answer")
        self.applied.append(key)
        if self.fail == "after":
            raise TimeoutError("answer lost")
        return {"receipt": len(self.applied)}

    def status(self, key: str) -> Outcome:
        self.checks += 1
        if self.check_raises:
            raise RuntimeError("status endpoint down")
        if self.check_says is not None:
            return self.check_says
        return Outcome.APPLIED if key in self.applied else Outcome.NOT_APPLIED


def make_guard(backend: Backend, clock: ManualClock, *, reconcile: bool = True) -> Guard:
    def check(args: Pay, ctx: ToolContext) -> Outcome:
        assert ctx.idempotency_key is not None
        return backend.status(ctx.idempotency_key)

    @tool(arguments=Pay, effect=Effect.WRITE, idempotent_backend=False, timeout=1.0,
          reconcile=check if reconcile else None)  # fmt: skip
    def pay(args: Pay, ctx: ToolContext) -> dict[str, Any]:
        """Pay from an account."""
        assert ctx.idempotency_key is not None
        return backend.pay(ctx.idempotency_key)

    policy = Policy(roles={"agent": RolePolicy(tools=frozenset({"pay"}))}, claim_lease=10.0)
    # The store's leases run on the test's clock, so moving it lets a dead writer's claim go stale.
    idempotency = MemoryIdempotencyStore(lease_clock=clock.lease_clock)
    return Guard(tools=[pay], policy=policy, clock=clock, idempotency=idempotency)


def run(guard: Guard) -> Any:
    return guard.session("s1", PRINCIPAL).execute("pay", json.dumps(ARGS))


def die_holding_the_claim(guard: Guard, clock: ManualClock) -> None:
    """What a process killed mid-write leaves: a claim on the key and no result."""
    canonical = json.dumps(ARGS, separators=(",", ":"))
    key = proposal_key("s1", "pay", canonical)
    guard.env.idempotency.claim(key, digest("pay", canonical), now=clock.now(), lease=10.0)


class TestSettleUnknown:
    @pytest.mark.parametrize("fail", ["after", "before"])
    def test_a_repeat_settles_a_timeout_as_the_backend_says(self, fail: str) -> None:
        """After a timeout the repeat answers what the status check says, and nothing runs twice."""
        backend, clock = Backend(fail=fail), ManualClock()
        guard = make_guard(backend, clock)
        first = run(guard)
        assert first.code == "TIMEOUT" and first.outcome is Outcome.UNKNOWN
        backend.fail = ""
        second = run(guard)
        assert second.replayed
        assert second.outcome is (Outcome.APPLIED if fail == "after" else Outcome.NOT_APPLIED)
        assert second.ok is (fail == "after")
        assert len(backend.applied) == (1 if fail == "after" else 0)

    def test_the_settled_outcome_is_stored(self) -> None:
        """Once settled, later repeats replay the settled answer without asking again."""
        backend, clock = Backend(fail="after"), ManualClock()
        guard = make_guard(backend, clock)
        run(guard)
        settled = run(guard)
        again = run(guard)
        assert backend.checks == 1
        assert again.replayed and again.outcome is settled.outcome is Outcome.APPLIED
        assert len(backend.applied) == 1

    @pytest.mark.parametrize("says", [Outcome.UNKNOWN, None])
    def test_a_check_that_cannot_tell_leaves_it_unknown(self, says: Outcome | None) -> None:
        """A check answering UNKNOWN, or failing, keeps the outcome unknown; a later one settles."""
        backend, clock = Backend(fail="after"), ManualClock()
        backend.check_says, backend.check_raises = says, says is None
        guard = make_guard(backend, clock)
        run(guard)
        still = run(guard)
        assert still.code == "TIMEOUT" and still.outcome is Outcome.UNKNOWN
        backend.check_says, backend.check_raises = None, False
        assert run(guard).outcome is Outcome.APPLIED
        assert len(backend.applied) == 1

    def test_a_failing_check_is_logged(self, caplog: pytest.LogCaptureFixture) -> None:
        """A status check that raises is logged with its traceback, never raised to the caller."""
        backend, clock = Backend(fail="after", check_raises=True), ManualClock()
        guard = make_guard(backend, clock)
        run(guard)
        with caplog.at_level(logging.ERROR):
            run(guard)
        assert any("status check of pay failed" in r.getMessage() for r in caplog.records)

    def test_without_a_check_unknown_replays_unknown(self) -> None:
        """A tool without ``reconcile`` keeps replaying the unknown outcome, as before."""
        backend, clock = Backend(fail="after"), ManualClock()
        guard = make_guard(backend, clock, reconcile=False)
        run(guard)
        assert run(guard).outcome is Outcome.UNKNOWN
        assert backend.checks == 0 and len(backend.applied) == 1


class TestSettleStaleClaim:
    def test_a_dead_writer_that_applied_is_settled_applied(self) -> None:
        """A claim left by a crash after the effect settles applied; the write does not run again."""
        backend, clock = Backend(), ManualClock()
        guard = make_guard(backend, clock)
        die_holding_the_claim(guard, clock)
        canonical = json.dumps(ARGS, separators=(",", ":"))
        backend.applied.append(proposal_key("s1", "pay", canonical))
        clock.advance(11.0)
        result = run(guard)
        assert result.ok and result.replayed and result.outcome is Outcome.APPLIED
        assert len(backend.applied) == 1

    def test_a_dead_writer_that_did_not_apply_lets_the_call_run(self) -> None:
        """A claim left by a crash before the effect is taken over: the call runs, once."""
        backend, clock = Backend(), ManualClock()
        guard = make_guard(backend, clock)
        die_holding_the_claim(guard, clock)
        clock.advance(11.0)
        result = run(guard)
        assert result.ok and not result.replayed and result.outcome is Outcome.APPLIED
        assert run(guard).replayed
        assert len(backend.applied) == 1

    def test_a_fresh_claim_is_not_checked(self) -> None:
        """Within the lease the twin may still be writing: IN_PROGRESS, and no status check."""
        backend, clock = Backend(), ManualClock()
        guard = make_guard(backend, clock)
        die_holding_the_claim(guard, clock)
        assert run(guard).code == "IN_PROGRESS"
        assert backend.checks == 0 and not backend.applied


class TestSettleApproved:
    def test_an_approved_actions_unknown_is_settled_under_its_approvals_key(self) -> None:
        """An approved write timed out after the backend applied it under the approval's key;
        the model re-proposing it gets the status check's answer about that key, named by
        that key and approval, and so does every later replay (the soak found the proposal's
        key reported, which the backend never saw); nothing runs twice."""
        backend, clock = Backend(fail="after"), ManualClock()
        asked: list[str] = []

        def check(args: Pay, ctx: ToolContext) -> Outcome:
            assert ctx.idempotency_key is not None
            asked.append(ctx.idempotency_key)
            return backend.status(ctx.idempotency_key)

        @tool(arguments=Pay, effect=Effect.WRITE, risk=Risk.HIGH, idempotent_backend=False,
              timeout=1.0, reconcile=check)  # fmt: skip
        def pay(args: Pay, ctx: ToolContext) -> dict[str, Any]:
            """Pay from an account."""
            assert ctx.idempotency_key is not None
            return backend.pay(ctx.idempotency_key)

        policy = Policy(roles={"agent": RolePolicy(tools=frozenset({"pay"}))}, claim_lease=10.0)
        guard = Guard(tools=[pay], policy=policy, clock=clock)
        proposed = run(guard)
        assert proposed.code == "CONFIRMATION_REQUIRED" and proposed.approval_id is not None
        ran = guard.approve(proposed.approval_id, by="alice")
        assert (ran.code, ran.outcome) == ("TIMEOUT", Outcome.UNKNOWN)
        sent = backend.applied[0]
        assert ran.idempotency_key == sent and sent.startswith("a_")
        backend.fail = ""
        settled = run(guard)
        again = run(guard)
        assert asked == [sent]
        for answer in (settled, again):
            assert (answer.ok, answer.outcome, answer.replayed) == (True, Outcome.APPLIED, True)
            assert answer.idempotency_key == sent
            assert answer.approval_id == proposed.approval_id
        assert backend.applied == [sent]
