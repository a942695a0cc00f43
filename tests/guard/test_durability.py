"""Writes run once: across threads, across processes, and across a restart, on one SQLite file."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import Effect, Guard, Policy, Principal, Risk, RolePolicy, ToolContext, ToolResult, tool
from guard.shop import build_shop
from guard.stores import open_sqlite_stores
from guard.testing import ManualClock
from tests.guard.conftest import approved_refund, refund_args


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice: str
    amount_cents: int


def payment_guard(db: Path, effects: Path) -> tuple[Guard, Any]:
    """A guard with one low-risk write that appends a line to ``effects`` per side effect."""

    @tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.LOW)
    def pay(args: Payment, ctx: ToolContext) -> dict[str, str]:
        """Pay an invoice."""
        time.sleep(0.05)  # widen the window in which a twin could slip through
        with open(effects, "a") as handle:
            handle.write(f"{os.getpid()} {ctx.idempotency_key}\n")
        return {"paid": args.invoice}

    stores = open_sqlite_stores(db)
    policy = Policy(
        roles={"ops": RolePolicy(tools=frozenset({"pay"}))},
        rate_limit=None,
        max_identical_calls=100,
        max_steps_per_turn=100,
    )
    guard = Guard(
        tools=[pay],
        policy=policy,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
    )
    return guard, stores


def pay_once(db: Path, effects: Path, start: Any, results: Any) -> None:
    """One worker process: wait for the start signal, send the write, report its code."""
    guard, stores = payment_guard(db, effects)
    try:
        session = guard.session("s1", Principal(id="OPS-1", role="ops"))
        start.wait()
        result = session.execute("pay", '{"invoice": "INV-7", "amount_cents": 500}')
        results.put((str(result.code), result.replayed))
    finally:
        stores.close()


class TestConcurrentWrites:
    def test_eight_threads_one_side_effect(self, tmp_path: Path) -> None:
        """8 threads with their own guards on one SQLite file send the same write: it runs once."""
        effects = tmp_path / "effects.log"
        barrier = threading.Barrier(8)
        results: list[ToolResult] = []
        lock = threading.Lock()

        def worker() -> None:
            guard, stores = payment_guard(tmp_path / "guard.db", effects)
            try:
                session = guard.session("s1", Principal(id="OPS-1", role="ops"))
                barrier.wait()
                result = session.execute("pay", '{"invoice": "INV-7", "amount_cents": 500}')
                with lock:
                    results.append(result)
            finally:
                stores.close()

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(effects.read_text().splitlines()) == 1
        executed = [r for r in results if r.ok and not r.replayed]
        assert len(executed) == 1
        assert {str(r.code) for r in results} <= {"OK", "IN_PROGRESS"}

    def test_two_processes_one_side_effect(self, tmp_path: Path) -> None:
        """2 processes on one SQLite file send the same write at the same moment: it runs once."""
        context = multiprocessing.get_context("spawn")
        start, results = context.Event(), context.Queue()
        effects, db = tmp_path / "effects.log", tmp_path / "guard.db"
        open_sqlite_stores(db).close()  # create the schema before the race
        workers = [
            context.Process(target=pay_once, args=(db, effects, start, results)) for _ in range(2)
        ]
        for worker in workers:
            worker.start()
        time.sleep(1.0)  # both processes import and open their stores
        start.set()
        outcomes = [results.get(timeout=60) for _ in workers]
        for worker in workers:
            worker.join(timeout=60)
        results.close()
        results.join_thread()
        assert len(effects.read_text().splitlines()) == 1
        assert sorted(code for code, _ in outcomes)[0] in {"IN_PROGRESS", "OK"}
        assert sum(1 for code, replayed in outcomes if code == "OK" and not replayed) == 1

    def test_eight_approvers_one_refund(self, tmp_path: Path) -> None:
        """8 threads approving the same pending refund at once produce one refund."""
        stores = open_sqlite_stores(tmp_path / "guard.db")
        try:
            shop = build_shop(
                idempotency=stores.idempotency, approvals=stores.approvals, counters=stores.counters
            )
            session = shop.session("s1", "CUS-1")
            session.execute("get_order", '{"order_id": "ORD-1001"}')
            pending = session.execute("refund_order", refund_args())
            assert pending.approval_id is not None
            barrier = threading.Barrier(8)
            codes: list[str] = []

            def approve() -> None:
                barrier.wait()
                codes.append(str(shop.guard.approve(pending.approval_id or "", by="h").code))

            threads = [threading.Thread(target=approve) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert shop.backend.side_effects == 1
            assert set(codes) <= {"OK", "IN_PROGRESS"}
        finally:
            stores.close()


class TestRestart:
    def test_completed_write_is_replayed_after_a_restart(self, tmp_path: Path) -> None:
        """A refund done before a restart is replayed after it, from the store, without a second refund."""
        db = tmp_path / "guard.db"
        clock = ManualClock()
        stores = open_sqlite_stores(db)
        first = build_shop(
            clock=clock,
            idempotency=stores.idempotency,
            approvals=stores.approvals,
            counters=stores.counters,
        )
        done = approved_refund(first)
        stores.close()

        stores = open_sqlite_stores(db)
        try:
            second = build_shop(
                clock=clock,
                idempotency=stores.idempotency,
                approvals=stores.approvals,
                counters=stores.counters,
            )
            again = second.session("s1", "CUS-1").execute("refund_order", refund_args())
            assert done.ok and again.ok and again.replayed
            assert again.data == done.data
            assert first.backend.side_effects == 1
            assert second.backend.side_effects == 0 and second.backend.requests == 0
        finally:
            stores.close()

    def test_pending_approval_survives_a_restart(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An approval asked for before a restart can be given after it, under the deployment key."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "deployment-key")
        db = tmp_path / "guard.db"
        stores = open_sqlite_stores(db)
        shop = build_shop(
            idempotency=stores.idempotency, approvals=stores.approvals, counters=stores.counters
        )
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", '{"order_id": "ORD-1001"}')
        pending = session.execute("refund_order", refund_args())
        stores.close()
        stores = open_sqlite_stores(db)
        try:
            later = build_shop(
                idempotency=stores.idempotency, approvals=stores.approvals, counters=stores.counters
            )
            assert pending.approval_id is not None
            assert later.guard.approve(pending.approval_id, by="h").ok
            assert later.backend.side_effects == 1
        finally:
            stores.close()
