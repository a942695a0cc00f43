"""At most once under clock skew: agents whose clocks step any way never take a live claim.

The soak's defect: an agent whose clock stepped +1000 s saw another agent's live claim (3 s
lease) as stale and took it over while the first write was still uncommitted. Leases now run on
the store's lease clock (``guard.stores.leaseclock``: the process's monotonic clock, the host's
boot clock for SQLite, the server's TIME for Redis), which no caller's clock moves. Here the
stores run on those real default clocks; only the guards' clocks are manual, stepped by
hypothesis. Every backend; the side effects are counted.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from guard import Effect, Guard, Policy, Principal, Risk, RolePolicy, ToolContext, tool
from guard.stores import (
    MemoryApprovalStore,
    MemoryCounterStore,
    MemoryIdempotencyStore,
    open_sqlite_stores,
)
from guard.stores.redis import open_redis_stores
from guard.testing import ManualClock

START = 1_767_225_600.0
ARGS = '{"invoice": "INV-7", "amount_cents": 500}'
USER = Principal(id="OPS-1", role="ops")
LEASE = 60.0  # real time on the store's clock: the test must finish well within it
POLICY = Policy(
    roles={"ops": RolePolicy(tools=frozenset({"pay"}))},
    rate_limit=None,
    max_identical_calls=1000,
    claim_lease=LEASE,
)
HOLD = 50.0
"""How long the holder waits, at most, for the test to let its write commit (within the lease)."""

# Steps of a caller's clock: small jitter, the soak's +90 s and +1000 s, and far beyond the
# result's replay window, either way.
STEPS = st.one_of(
    st.sampled_from([90.0, 1000.0, -1000.0, LEASE + 0.001, -(LEASE + 0.001), 86_401.0]),
    st.floats(min_value=-1e7, max_value=1e7, allow_nan=False),
)
SCHEDULES = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2), STEPS, st.sampled_from(["A", "B", "C"])),
    min_size=1,
    max_size=12,
)


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice: str
    amount_cents: int


@dataclass
class Ledger:
    """The world: payments applied, and the holder's handshake with the test."""

    paid: list[str] = field(default_factory=list)
    entered: threading.Event = field(default_factory=threading.Event)
    commit: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def agent(stores: Any, ledger: Ledger, *, dedupes: bool) -> tuple[Guard, ManualClock]:
    """One agent: its own guard and its own (manual) clock over the shared stores."""

    @tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.LOW, idempotent_backend=dedupes)
    def pay(args: Payment, ctx: ToolContext) -> dict[str, str]:
        """Pay an invoice; the first payment waits, uncommitted, until the test lets it go."""
        with ledger.lock:
            ledger.paid.append(ctx.idempotency_key or "")
            first = len(ledger.paid) == 1
        if first:
            ledger.entered.set()
            ledger.commit.wait(HOLD)
        return {"paid": args.invoice}

    clock = ManualClock(START)
    guard = Guard(
        tools=[pay],
        policy=POLICY,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
        clock=clock,
    )
    return guard, clock


@dataclass
class MemoryStores:
    idempotency: MemoryIdempotencyStore = field(default_factory=MemoryIdempotencyStore)
    approvals: MemoryApprovalStore = field(default_factory=MemoryApprovalStore)
    counters: MemoryCounterStore = field(default_factory=MemoryCounterStore)

    def close(self) -> None:
        """Nothing to close: the memory stores hold no connections."""


Opener = Callable[[], Any]
"""Opens one agent's stores on a shared backend: a connection of its own, as a process has."""


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Opener]]:
    """Makes a fresh shared place per example (memory stores, a SQLite file, a Redis prefix) and
    returns how to open it; the memory stores are one object every agent of the process shares."""
    places = iter(range(1_000_000))
    if request.param == "memory":

        def memory() -> Opener:
            shared = MemoryStores()
            return lambda: shared

        yield memory
        return
    if request.param == "sqlite":

        def sqlite_file() -> Opener:
            path = tmp_path / f"guard-{next(places)}.db"
            return lambda: open_sqlite_stores(path)

        yield sqlite_file
        return
    client = request.getfixturevalue("redis_client")
    url = request.getfixturevalue("redis_url")

    def redis_prefix() -> Opener:
        prefix = f"skew{next(places)}:"
        return lambda: open_redis_stores(url, prefix=prefix)

    yield redis_prefix
    client.flushdb()


FUZZ = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


class TestSteppedClocks:
    @FUZZ
    @given(schedule=SCHEDULES, dedupes=st.booleans())
    def test_no_stepped_clock_takes_a_live_claim(
        self,
        backend: Callable[[], Opener],
        schedule: list[tuple[int, float, str]],
        dedupes: bool,
    ) -> None:
        """Agent 0's write is applied but not committed; the other agents' clocks step by the
        schedule (forward, back, far past the lease and the replay window) and each proposes
        the same write from its session: every answer is IN_PROGRESS under the holder's key,
        and the payment is applied exactly once."""
        ledger = Ledger()
        opener = backend()
        opened = [opener() for _ in range(3)]
        try:
            agents = [agent(stores, ledger, dedupes=dedupes) for stores in opened]
            holder: list[Any] = []
            first = threading.Thread(
                target=lambda: holder.append(agents[0][0].session("A", USER).execute("pay", ARGS))
            )
            first.start()
            try:
                assert ledger.entered.wait(HOLD), "the holder never reached its handler"
                for index, step, session in schedule:
                    guard, clock = agents[index]
                    clock.advance(step)
                    answer = guard.session(session, USER).execute("pay", ARGS)
                    assert answer.code == "IN_PROGRESS", (index, step, session, answer)
                    assert answer.idempotency_key == ledger.paid[0]
                    assert len(ledger.paid) == 1
            finally:
                ledger.commit.set()
                first.join(HOLD)
            assert holder[0].ok and len(ledger.paid) == 1
        finally:
            for stores in opened:
                stores.close()


def _propose(where: str, step: float, session: str, answers: Any) -> None:
    """Another process: an agent whose clock stepped by ``step`` proposes the same payment."""
    stores = (
        open_redis_stores(where, prefix="procs:") if "://" in where else open_sqlite_stores(where)
    )
    ledger = Ledger()
    ledger.paid.append("someone else's")  # this agent is never the first payer: it must not pay
    guard, clock = agent(stores, ledger, dedupes=False)
    clock.advance(step)
    result = guard.session(session, USER).execute("pay", ARGS)
    answers.put((str(result.code), result.idempotency_key, len(ledger.paid) - 1, os.getpid()))
    stores.close()


class TestSteppedProcesses:
    @pytest.mark.parametrize("backend", ["sqlite", "redis"])
    def test_processes_with_stepped_clocks_never_take_a_live_claim(
        self, backend: str, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        """The soak's shape: the holder in this process mid-write; three other processes whose
        clocks stepped +1000 s, -1000 s and +10**7 s propose the same write: IN_PROGRESS for
        each, nothing paid by any of them, one payment in all."""
        if backend == "sqlite":
            where = str(tmp_path / "guard.db")
        else:
            request.getfixturevalue("redis_client")
            where = request.getfixturevalue("redis_url")
        stores = (
            open_redis_stores(where, prefix="procs:")
            if backend == "redis"
            else (open_sqlite_stores(where))
        )
        ledger = Ledger()
        guard, _ = agent(stores, ledger, dedupes=False)
        holder: list[Any] = []
        first = threading.Thread(
            target=lambda: holder.append(guard.session("A", USER).execute("pay", ARGS))
        )
        first.start()
        context = multiprocessing.get_context("spawn")
        answers = context.Queue()
        try:
            assert ledger.entered.wait(HOLD)
            workers = [
                context.Process(target=_propose, args=(where, step, session, answers))
                for step, session in ((1000.0, "A"), (-1000.0, "B"), (1e7, "C"))
            ]
            for worker in workers:
                worker.start()
            seen = [answers.get(timeout=HOLD) for _ in workers]
            for worker in workers:
                worker.join(timeout=HOLD)
            assert [worker.exitcode for worker in workers] == [0, 0, 0]
        finally:
            ledger.commit.set()
            first.join(HOLD)
            stores.close()
        assert {(code, key, paid) for code, key, paid, _ in seen} == {
            ("IN_PROGRESS", ledger.paid[0], 0)
        }
        assert holder[0].ok and len(ledger.paid) == 1
