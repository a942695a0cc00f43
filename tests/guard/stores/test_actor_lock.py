"""Two scopes: replays are the conversation's; the in-flight lock is the actor's.

A write's key is its session's (session, tool, canonical arguments): a completed write replays in
its own conversation only, and another conversation of the same user runs it, under its own rules
and confirmation. While the write runs, an actor-scoped lock (the authenticated principal, else the
session) in the same durable store holds every other session off: IN_PROGRESS while it is live,
TIMEOUT/unknown with the holder's key once it went stale or ended unknown, never a second run.
Every backend: memory, a SQLite file, a real redis-server. Side effects counted throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from guard import (
    Effect,
    Guard,
    Policy,
    Principal,
    RetryPolicy,
    Risk,
    RolePolicy,
    ToolContext,
    ToolResult,
    TransientError,
    tool,
)
from guard.stages.base import digest
from guard.stages.idempotency import actor, lock_key, proposal_key
from guard.stores import (
    IdempotencyStore,
    MemoryApprovalStore,
    MemoryCounterStore,
    MemoryIdempotencyStore,
    open_sqlite_stores,
)
from guard.stores._rules import ABANDONED_RETENTION
from guard.stores.redis import open_redis_stores
from guard.testing import ManualClock
from tests.guard.stores.conftest import backdate_leases

ARGS = '{"invoice": "INV-7", "amount_cents": 500}'
CANONICAL = '{"invoice":"INV-7","amount_cents":500}'
USER = Principal(id="OPS-1", role="ops")
POLICY = Policy(
    roles={"ops": RolePolicy(tools=frozenset({"pay", "transfer"}))},
    rate_limit=None,
    max_identical_calls=100,
)


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice: str
    amount_cents: int


@dataclass
class World:
    """The guard, its idempotency store, and what its handlers did."""

    guard: Guard
    idempotency: IdempotencyStore
    clock: ManualClock
    paid: list[str | None] = field(default_factory=list)
    during: list[Callable[[], Any]] = field(default_factory=list)
    """Run inside the next ``pay`` (after it applied), as a second host would act meanwhile."""
    fail: list[BaseException] = field(default_factory=list)
    """Raised by the next ``pay`` attempts, one each (after applying unless a TransientError)."""

    backdate: Callable[[float], object] | None = None
    """Redis's lease clock is its own TIME: claims are stamped back instead of it moving on."""

    def session(self, session_id: str, principal: Principal = USER) -> Any:
        return self.guard.session(session_id, principal)

    def advance(self, seconds: float) -> None:
        """Time passes for the guard and for the store's leases alike."""
        self.clock.advance(seconds)
        if self.backdate is not None:
            self.backdate(seconds)


@dataclass
class Stores:
    """A backend's three stores, on a lease clock the test moves (``World.advance``)."""

    idempotency: IdempotencyStore
    approvals: Any
    counters: Any
    clock: ManualClock
    backdate: Callable[[float], object] | None = None


def build(stores: Stores, dedupes: bool) -> World:
    clock = stores.clock
    idempotency, approvals, counters = stores.idempotency, stores.approvals, stores.counters
    world: World

    @tool(
        arguments=Payment,
        effect=Effect.WRITE,
        risk=Risk.LOW,
        idempotent_backend=dedupes,
        retry=RetryPolicy(attempts=2, base_delay=0.0, jitter=False),
    )
    def pay(args: Payment, ctx: ToolContext) -> dict[str, str]:
        """Pay an invoice."""
        if world.fail and isinstance(world.fail[0], TransientError):
            raise world.fail.pop(0)
        world.paid.append(ctx.idempotency_key)
        while world.during:
            world.during.pop(0)()
        if world.fail:
            raise world.fail.pop(0)
        return {"paid": args.invoice}

    @tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.HIGH)
    def transfer(args: Payment, ctx: ToolContext) -> dict[str, str]:
        """Transfer money: a high-risk write, confirmed by a human."""
        world.paid.append(ctx.idempotency_key)
        return {"sent": args.invoice}

    guard = Guard(
        tools=[pay, transfer],
        policy=POLICY,
        idempotency=idempotency,
        approvals=approvals,
        counters=counters,
        clock=clock,
    )
    world = World(guard=guard, idempotency=idempotency, clock=clock, backdate=stores.backdate)
    return world


@pytest.fixture(params=["memory", "sqlite", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    clock = ManualClock()
    if request.param == "memory":
        idempotency = MemoryIdempotencyStore(lease_clock=clock.lease_clock)
        yield Stores(idempotency, MemoryApprovalStore(), MemoryCounterStore(), clock)
        return
    opened: Any
    backdate = None
    if request.param == "sqlite":
        opened = open_sqlite_stores(tmp_path / "guard.db", lease_clock=clock.lease_clock)
    else:
        client = request.getfixturevalue("redis_client")
        opened = open_redis_stores(request.getfixturevalue("redis_url"), prefix="lock:")
        backdate = partial(backdate_leases, client)
    yield Stores(opened.idempotency, opened.approvals, opened.counters, clock, backdate)
    opened.close()


@pytest.fixture
def world(stores: Stores) -> World:
    return build(stores, dedupes=False)


@pytest.fixture
def deduping(stores: Stores) -> World:
    return build(stores, dedupes=True)


class TestReplaysArePerConversation:
    def test_a_completed_write_runs_again_in_another_conversation(self, world: World) -> None:
        """After A's write completed, B (same user) runs its own; each replays only its own."""
        first = world.session("A").execute("pay", ARGS)
        second = world.session("B").execute("pay", ARGS)
        assert first.ok and second.ok and not second.replayed
        assert first.idempotency_key != second.idempotency_key
        assert world.session("A").execute("pay", ARGS).replayed
        assert world.session("B").execute("pay", ARGS).replayed
        assert world.paid == [first.idempotency_key, second.idempotency_key]

    def test_another_clients_high_risk_write_asks_its_own_confirmation(self, world: World) -> None:
        """Issue 21 item 9's class: client B of the same principal proposing A's approved
        high-risk write is not handed A's result: it gets a pending action of its own, and
        nothing runs until a human approves that one."""
        pending_a = world.session("A").execute("transfer", ARGS)
        assert pending_a.code == "CONFIRMATION_REQUIRED" and pending_a.approval_id is not None
        assert world.guard.approve(pending_a.approval_id, by="human").ok
        assert len(world.paid) == 1
        assert world.session("A").execute("transfer", ARGS).replayed
        pending_b = world.session("B").execute("transfer", ARGS)
        assert pending_b.code == "CONFIRMATION_REQUIRED" and not pending_b.replayed
        assert pending_b.approval_id not in (None, pending_a.approval_id)
        assert len(world.paid) == 1
        assert world.guard.deny(pending_b.approval_id or "", by="human").code == (
            "CONFIRMATION_DENIED"
        )
        assert len(world.paid) == 1

    def test_pending_approvals_are_per_conversation(self, world: World) -> None:
        """B's identical proposal while A's waits for a human opens B's own pending action;
        approving A's runs once, B's stays pending."""
        pending_a = world.session("A").execute("transfer", ARGS)
        pending_b = world.session("B").execute("transfer", ARGS)
        assert pending_a.code == pending_b.code == "CONFIRMATION_REQUIRED"  # no lock held
        assert pending_a.approval_id != pending_b.approval_id
        assert world.guard.approve(pending_a.approval_id or "", by="human").ok
        assert len(world.paid) == 1
        action = world.guard.pending(pending_b.approval_id or "")
        assert action is not None and action.state == "pending"


class TestTheActorLock:
    def test_another_session_waits_while_the_write_runs(self, world: World) -> None:
        """B proposing the same write while A's runs gets IN_PROGRESS with A's key, and runs
        nothing; once A's outcome is known the lock is gone and B runs its own."""
        seen: list[ToolResult] = []
        world.during.append(lambda: seen.append(world.session("B").execute("pay", ARGS)))
        first = world.session("A").execute("pay", ARGS)
        assert first.ok and (seen[0].code, seen[0].outcome) == ("IN_PROGRESS", "unknown")
        assert seen[0].idempotency_key == first.idempotency_key
        assert len(world.paid) == 1
        assert world.session("B").execute("pay", ARGS).ok
        assert len(world.paid) == 2

    def test_the_lock_is_the_actors_not_the_worlds(self, world: World) -> None:
        """Another user, or an anonymous session beside another, is not held by A's lock."""
        stranger = Principal.anonymous(role="ops")
        seen: list[ToolResult] = []
        world.during.append(
            lambda: seen.append(
                world.session("B", Principal(id="OPS-2", role="ops")).execute("pay", ARGS)
            )
        )
        world.during.append(lambda: seen.append(world.session("C", stranger).execute("pay", ARGS)))
        world.session("A", stranger).execute("pay", ARGS)
        assert [result.code for result in seen] == ["OK", "OK"]
        assert len(world.paid) == 3

    def test_a_crashed_holder_leaves_every_session_timeout(self, world: World) -> None:
        """A dead attempt's lock (claimed, never settled): within its lease IN_PROGRESS, after
        it TIMEOUT/unknown with the dead key for the first session, replayed for every later
        one until ``idempotency_ttl``; never a run."""
        dead = "k_dead-attempt"
        lock = lock_key(actor(USER, "A"), "pay", CANONICAL)
        fingerprint = _fingerprint()
        now, lease = world.clock.now(), POLICY.claim_lease
        world.idempotency.claim(dead, fingerprint, now=now, lease=lease, lock=lock)
        held = world.session("B").execute("pay", ARGS)
        assert (held.code, held.outcome, held.idempotency_key) == ("IN_PROGRESS", "unknown", dead)
        world.advance(lease + 1)
        after = world.session("C").execute("pay", ARGS)
        assert (after.code, after.outcome, after.idempotency_key) == ("TIMEOUT", "unknown", dead)
        assert not after.replayed and dead in after.message
        world.advance(POLICY.idempotency_ttl - 60)
        for session_id in ("B", "C", "D"):
            later = world.session(session_id).execute("pay", ARGS)
            assert (later.code, later.replayed, later.idempotency_key) == ("TIMEOUT", True, dead)
        assert world.paid == []
        world.advance(120)  # the unknown's replay window is over
        assert world.session("E").execute("pay", ARGS).ok and len(world.paid) == 1

    @pytest.mark.parametrize("fault", [TimeoutError, RuntimeError])
    def test_an_unknown_outcome_in_one_session_is_every_sessions(
        self, world: World, fault: type[Exception]
    ) -> None:
        """A write that ended unknown in A (timed out, or a bug after it may have applied)
        leaves the actor's record unknown: B and C are told the same, nothing runs again."""
        world.fail.append(fault("after applying"))
        first = world.session("A").execute("pay", ARGS)
        assert first.outcome == "unknown" and len(world.paid) == 1
        for session_id in ("B", "C"):
            later = world.session(session_id).execute("pay", ARGS)
            assert later.outcome == "unknown" and later.replayed
            assert later.idempotency_key == first.idempotency_key
        assert len(world.paid) == 1

    @pytest.mark.parametrize(
        ("faults", "attempts"),
        [([TimeoutError("lost"), TimeoutError("lost")], 2), ([RuntimeError("bug")], 1)],
        ids=["timed-out", "raised"],
    )
    def test_an_unknown_at_a_deduping_backend_is_retried_only_under_its_key(
        self, deduping: World, faults: list[Exception], attempts: int
    ) -> None:
        """With a backend that deduplicates by key, A's own retry runs under A's key (the
        backend matches it); B is told the outcome is unknown, since B's key would not match."""
        deduping.fail += faults
        first = deduping.session("A").execute("pay", ARGS)
        assert first.outcome == "unknown" and len(deduping.paid) == attempts
        other = deduping.session("B").execute("pay", ARGS)
        assert other.outcome == "unknown" and other.idempotency_key == first.idempotency_key
        assert deduping.session("A").execute("pay", ARGS).ok
        assert deduping.paid == [first.idempotency_key] * (attempts + 1)  # then A's own retry

    def test_an_interrupted_write_at_a_deduping_backend_stays_unknown_for_others(
        self, deduping: World
    ) -> None:
        """A write interrupted mid-handler (KeyboardInterrupt: the pipeline's own path, not the
        execute stage's) at a deduping backend: A may retry under its key, B is told unknown."""
        deduping.fail.append(KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            deduping.session("A").execute("pay", ARGS)
        assert len(deduping.paid) == 1
        other = deduping.session("B").execute("pay", ARGS)
        assert other.outcome == "unknown" and len(deduping.paid) == 1

    def test_a_stale_lock_at_a_deduping_backend_is_taken_over_under_the_dead_key(
        self, deduping: World
    ) -> None:
        """The dead attempt's key is the one the backend can match: B retries under it, once;
        a third session is then a new conversation of its own."""
        dead = "k_dead-attempt"
        lock = lock_key(actor(USER, "A"), "pay", CANONICAL)
        now, lease = deduping.clock.now(), POLICY.claim_lease
        deduping.idempotency.claim(dead, _fingerprint(), now=now, lease=lease, lock=lock)
        deduping.advance(lease + 1)
        retried = deduping.session("B").execute("pay", ARGS)
        assert retried.ok and retried.idempotency_key == dead and deduping.paid == [dead]
        third = deduping.session("C").execute("pay", ARGS)
        assert (
            third.ok
            and deduping.paid == [dead, third.idempotency_key]
            and third.idempotency_key != dead
        )

    def test_a_write_not_applied_frees_the_lock(self, world: World) -> None:
        """UPSTREAM_UNAVAILABLE (nothing happened) releases the lock: B runs at once."""
        world.fail += [TransientError("down"), TransientError("down")]
        first = world.session("A").execute("pay", ARGS)
        assert first.code == "UPSTREAM_UNAVAILABLE" and world.paid == []
        assert world.session("B").execute("pay", ARGS).ok and len(world.paid) == 1


def _fingerprint() -> str:
    return digest("pay", CANONICAL)


SESSIONS = ("A", "B", "C")
STEPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["ok", "timeout", "down", "crash"]), st.sampled_from(SESSIONS)),
        st.tuples(st.just("wait"), st.sampled_from([1.0, POLICY.claim_lease + 1, 86_401.0])),
    ),
    max_size=14,
)


@dataclass
class Expected:
    """What the two scopes promise, as a model: each session's own results, the actor's lock."""

    own: dict[str, tuple[str, float]] = field(default_factory=dict)
    """session -> ("applied" | "unknown", replayed until) or ("in_flight", claimed at)."""
    lock: tuple[str, float] | None = None
    """("unknown", replayed until) or ("in_flight", claimed at)."""
    holder: str = ""
    """The session whose attempt holds the lock."""

    def alive(self, entry: tuple[str, float] | None, now: float) -> tuple[str, float] | None:
        """The entry unless expired: a result after its ttl, a dead claim after its retention."""
        if entry is None:
            return None
        if entry[0] == "in_flight":
            until = entry[1] + POLICY.claim_lease + ABANDONED_RETENTION
        else:
            until = entry[1]
        return entry if until >= now else None

    def answer(self, session: str, now: float) -> str:
        """The code class a proposal gets without running, or "run"; updates the model."""
        lease = POLICY.claim_lease
        own = self.alive(self.own.get(session), now)
        if own is not None and own[0] != "in_flight":
            return "replay"
        if own is not None:  # this session's own dead attempt
            if own[1] + lease >= now:
                return "IN_PROGRESS"
            self.own[session] = self.lock = ("unknown", now + POLICY.idempotency_ttl)
            return "TIMEOUT"
        lock = self.alive(self.lock, now)
        if lock is None:
            return "run"
        if lock[0] == "unknown":
            return "replay"
        if lock[1] + lease >= now:
            return "IN_PROGRESS"
        # Recorded under the dead attempt's key too: its own session replays it as well.
        self.lock = self.own[self.holder] = ("unknown", now + POLICY.idempotency_ttl)
        return "TIMEOUT"


class TestAnyInterleaving:
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(steps=STEPS)
    def test_sessions_of_one_user_follow_the_two_scopes(self, steps: list[tuple[Any, Any]]) -> None:
        """Any mix of completed, timed-out, failed and crashed writes from three sessions of one
        user, with time passing: each proposal runs exactly when the model says (no replay into
        another conversation; nothing runs while the actor's lock is live, stale or unknown)."""
        clock = ManualClock()
        idempotency = MemoryIdempotencyStore(lease_clock=clock.lease_clock)
        world = build(
            Stores(idempotency, MemoryApprovalStore(), MemoryCounterStore(), clock), dedupes=False
        )
        expected = Expected()
        for kind, arg in steps:
            now = world.clock.now()
            if kind == "wait":
                world.advance(arg)
                continue
            before = len(world.paid)
            if kind == "crash":  # a process that claimed, applied and died: only if it could run
                if replace(expected, own=dict(expected.own)).answer(arg, now) == "run":
                    key = proposal_key(arg, "pay", CANONICAL)
                    lock = lock_key(actor(USER, arg), "pay", CANONICAL)
                    claim = world.idempotency.claim(
                        key, _fingerprint(), now=now, lease=POLICY.claim_lease, lock=lock
                    )
                    assert claim.state == "claimed"
                    world.paid.append(key)
                    expected.own[arg] = expected.lock = ("in_flight", now)
                    expected.holder = arg
                continue
            answer = expected.answer(arg, now)
            if kind == "timeout":
                world.fail[:] = [TimeoutError("lost")]
            elif kind == "down":
                world.fail[:] = [TransientError("down"), TransientError("down")]
            result = world.session(arg).execute("pay", ARGS)
            world.fail.clear()
            ran = len(world.paid) - before
            if answer == "run":
                assert ran == (0 if kind == "down" else 1), (kind, arg, result)
                if kind == "ok":
                    expected.own[arg] = ("applied", now + POLICY.idempotency_ttl)
                elif kind == "timeout":
                    expected.own[arg] = ("unknown", now + POLICY.idempotency_ttl)
                    expected.lock, expected.holder = expected.own[arg], arg
                continue
            assert ran == 0, (kind, arg, answer, result)
            if answer == "replay":
                assert result.replayed, (arg, result)
            else:
                assert result.code == answer and not result.replayed, (arg, answer, result)
