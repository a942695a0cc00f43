"""What only the SQLite stores promise: durability, several processes, and tidy connections."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import pytest

from guard.stores import (
    ApprovalState,
    Claim,
    ClaimState,
    PendingAction,
    SQLiteApprovalStore,
    SQLiteCounterStore,
    SQLiteIdempotencyStore,
    SQLiteStores,
    open_sqlite_stores,
)
from guard.stores.leaseclock import BOOT_ID_PATH, host_lease_clock
from guard.testing import ManualClock
from tests.guard.stores.threads import run_together

KEYS = [f"key-{i}" for i in range(200)]


def _claim_keys(path: str, barrier: Barrier, results: multiprocessing.Queue[list[str]]) -> None:
    """Child process: open its own store, wait for the other, claim every key, report wins."""
    store = SQLiteIdempotencyStore(path)
    try:
        barrier.wait(timeout=30)
        won = [
            k
            for k in KEYS
            if store.claim(k, "f", now=0.0, lease=60.0) == Claim(state=ClaimState.CLAIMED)
        ]
    finally:
        store.close()
    results.put(won)


def _add_within(path: str, barrier: Barrier, results: multiprocessing.Queue[int]) -> None:
    """Child process: race add_within on one counter and report how many adds succeeded."""
    store = SQLiteCounterStore(path)
    try:
        barrier.wait(timeout=30)
        added = sum(store.add_within("c", 1, 150, now=0.0, ttl=100.0) for _ in range(100))
    finally:
        store.close()
    results.put(added)


def _claim_and_report_stamp(
    path: str, barrier: Barrier, results: multiprocessing.Queue[tuple[str, tuple[str, float]]]
) -> None:
    """Child process: claim a key of its own on the host's lease clock, report the stored stamp."""
    key = f"pid-{os.getpid()}"
    store = SQLiteIdempotencyStore(path)
    try:
        barrier.wait(timeout=30)
        store.claim(key, "f", now=1e9, lease=60.0)  # a caller's clock far ahead changes nothing
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as conn:
        epoch, leased_at = conn.execute(
            "SELECT lease_epoch, leased_at FROM idempotency WHERE key = ?", (key,)
        ).fetchone()
    results.put((key, (epoch, leased_at)))


def action() -> PendingAction:
    return PendingAction(
        id="apr_1",
        session_id="s1",
        principal_id="u1",
        role="support",
        scopes=("refunds:write",),
        tool="refund",
        arguments='{"amount_cents":500}',
        fingerprint="fp",
        proposal_key="prop",
        call_id="c1",
        reason="CONFIRMATION_REQUIRED",
        created_at=0.0,
        expires_at=900.0,
    )


class TestProcesses:
    def test_two_processes_claim_each_key_exactly_once(self, tmp_path: Path) -> None:
        """Two processes racing over the same keys on one file never both claim a key."""
        wins = _race(_claim_keys, tmp_path / "stores.db")
        claimed = [key for won in wins for key in won]
        assert sorted(claimed) == sorted(KEYS)

    def test_two_processes_add_within_never_exceed_the_limit(self, tmp_path: Path) -> None:
        """Two processes racing add_within on one counter stop exactly at the limit."""
        assert sum(_race(_add_within, tmp_path / "stores.db")) == 150
        with SQLiteCounterStore(tmp_path / "stores.db") as store:
            assert store.get("c", now=0.0) == 150


def _race(target: Callable[..., None], path: Path) -> list[Any]:
    """Run ``target`` in two spawned processes released together; collect what each reports."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: multiprocessing.Queue[Any] = ctx.Queue()
    procs = [ctx.Process(target=target, args=(str(path), barrier, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    try:
        reports = [results.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.exitcode is None:  # hung: never leave a child for interpreter exit to wait on
                proc.kill()
                proc.join()
        results.close()
        results.join_thread()
    assert [proc.exitcode for proc in procs] == [0, 0]
    for proc in procs:
        proc.close()
    return reports


class TestDurability:
    def test_completed_result_survives_a_restart(self, tmp_path: Path) -> None:
        """A result completed before close replays from a new store on the same file."""
        with SQLiteIdempotencyStore(tmp_path / "stores.db") as store:
            store.claim("k", "f", now=0.0, lease=60.0)
            store.complete("k", "f", '{"ok":true}', now=1.0, ttl=3600.0)
        with SQLiteIdempotencyStore(tmp_path / "stores.db") as store:
            claim = store.claim("k", "f", now=2.0, lease=60.0)
        assert claim == Claim(state=ClaimState.COMPLETED, result='{"ok":true}')

    def test_in_flight_claim_survives_a_restart(self, tmp_path: Path) -> None:
        """A claim held when the process stopped still blocks until its lease runs out on the
        store's lease clock."""
        clock = ManualClock(0.0)
        with SQLiteIdempotencyStore(tmp_path / "stores.db", lease_clock=clock.lease_clock) as store:
            store.claim("k", "f", now=0.0, lease=60.0)
        with SQLiteIdempotencyStore(tmp_path / "stores.db", lease_clock=clock.lease_clock) as store:
            clock.advance(1.0)
            assert store.claim("k", "f", now=1.0, lease=60.0).state is ClaimState.IN_FLIGHT
            clock.advance(60.0)
            assert store.claim("k", "f", now=61.0, lease=60.0).state is ClaimState.CLAIMED

    def test_a_claim_from_before_a_reboot_is_stale(self, tmp_path: Path) -> None:
        """Stamped in another epoch of the lease clock (another boot id): stale at once, though
        its reading is later than the new boot's."""
        path = tmp_path / "stores.db"
        with SQLiteIdempotencyStore(path, lease_clock=lambda: ("boot-1", 5000.0)) as store:
            store.claim("k", "f", now=0.0, lease=60.0)
        with SQLiteIdempotencyStore(path, lease_clock=lambda: ("boot-2", 1.0)) as store:
            assert store.claim("k", "f", now=0.0, lease=60.0, take_stale=False).state is (
                ClaimState.STALE
            )


class TestHostLeaseClock:
    """The SQLite store's default lease clock: the kernel's boot id and CLOCK_BOOTTIME."""

    def test_it_reads_the_boot_id_and_the_boot_time_clock(self) -> None:
        """Epoch is this boot's id; the reading lies between two reads of CLOCK_BOOTTIME."""
        before = time.clock_gettime(time.CLOCK_BOOTTIME)
        epoch, reading = host_lease_clock()
        after = time.clock_gettime(time.CLOCK_BOOTTIME)
        assert epoch == BOOT_ID_PATH.read_text().strip()
        assert before <= reading <= after

    def test_processes_on_the_host_read_one_clock(self, tmp_path: Path) -> None:
        """A claim stamped by another process is live here and its stamp is no later than this
        process's reading: the clock is the host's, not the process's."""
        path = tmp_path / "stores.db"
        reports = _race(_claim_and_report_stamp, path)
        epoch, reading = host_lease_clock()
        stamps = [stamp for _, stamp in reports]
        assert all(stamp[0] == epoch and stamp[1] <= reading for stamp in stamps)
        with SQLiteIdempotencyStore(path) as store:
            answers = {store.claim(key, "f", now=-1e9, lease=60.0).state for key, _ in reports}
        assert answers == {ClaimState.IN_FLIGHT}

    def test_a_file_made_before_locks_gains_their_columns(self, tmp_path: Path) -> None:
        """A store opened on an older file keeps its claims and takes locks from then on."""
        path = tmp_path / "stores.db"
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TABLE idempotency (key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, "
                "result TEXT, claimed_at REAL NOT NULL, expires_at REAL NOT NULL)"
            )
            conn.execute("INSERT INTO idempotency VALUES ('old', 'f', '\"r\"', 0.0, 3600.0)")
        conn.close()
        with SQLiteIdempotencyStore(path) as store:
            assert store.claim("old", "f", now=1.0, lease=60.0).result == '"r"'
            assert store.claim("k1", "f", now=1.0, lease=60.0, lock="l").state == "claimed"
            assert store.claim("k2", "f", now=2.0, lease=60.0, lock="l").holder == "k1"

    def test_approvals_and_counters_survive_a_restart(self, tmp_path: Path) -> None:
        """Decisions and counts written before close read back after reopening."""
        with open_sqlite_stores(tmp_path / "stores.db") as stores:
            stores.approvals.create(action())
            stores.approvals.decide("apr_1", approve=True, by="alice", now=5.0)
            stores.counters.incr("c", 4, now=0.0, ttl=100.0)
        with open_sqlite_stores(tmp_path / "stores.db") as stores:
            assert stores.approvals.get("apr_1") == action().decided(
                ApprovalState.APPROVED, by="alice", at=5.0
            )
            assert stores.counters.get("c", now=1.0) == 4


class TestConnections:
    def test_file_is_in_wal_mode(self, tmp_path: Path) -> None:
        """Opening a store switches the file to the WAL journal, so readers never block."""
        SQLiteCounterStore(tmp_path / "stores.db").close()
        conn = sqlite3.connect(tmp_path / "stores.db")
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        finally:
            conn.close()

    def test_one_file_holds_all_three_tables(self, tmp_path: Path) -> None:
        """open_sqlite_stores creates the idempotency, approvals and counters tables together."""
        with open_sqlite_stores(tmp_path / "stores.db") as stores:
            assert isinstance(stores, SQLiteStores)
        conn = sqlite3.connect(tmp_path / "stores.db")
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            conn.close()
        assert {name for (name,) in rows} == {"approvals", "counters", "idempotency"}

    def test_store_is_unusable_after_close(self, tmp_path: Path) -> None:
        """Calls after close fail loudly instead of reopening behind the host's back."""
        store = SQLiteCounterStore(tmp_path / "stores.db")
        store.close()
        with pytest.raises(sqlite3.ProgrammingError):
            store.get("c", now=0.0)

    def test_close_also_closes_other_threads_connections(self, tmp_path: Path) -> None:
        """Connections opened on worker threads are closed by close() on the main thread."""
        store = SQLiteCounterStore(tmp_path / "stores.db")
        run_together(4, lambda _: store.incr("c", now=0.0, ttl=100.0))
        store.close()
        # Nothing leaks: pytest turns an unclosed connection's ResourceWarning into an error.
        assert store._connections == []

    def test_connections_of_ended_threads_are_closed(self, tmp_path: Path) -> None:
        """A thread per request does not leave one open connection per request behind."""
        with SQLiteCounterStore(tmp_path / "stores.db") as store:
            for _ in range(20):
                thread = threading.Thread(
                    target=store.incr, args=("c",), kwargs={"now": 0.0, "ttl": 9.0}
                )
                thread.start()
                thread.join()
            assert len(store._connections) <= 2
            assert store.get("c", now=0.0) == 20

    def test_unknown_synchronous_mode_is_rejected(self, tmp_path: Path) -> None:
        """The synchronous pragma is checked, since it is spliced into SQL."""
        with pytest.raises(ValueError, match="synchronous"):
            SQLiteCounterStore(tmp_path / "stores.db", synchronous="SOMETIMES")  # type: ignore[arg-type]

    def test_store_for_approvals_accepts_a_retention(self, tmp_path: Path) -> None:
        """open_sqlite_stores passes retention to the approval store's purge."""
        with open_sqlite_stores(tmp_path / "stores.db", retention=10.0) as stores:
            stores.approvals.create(action())
            assert stores.approvals.purge(911.0) == 1
            assert isinstance(stores.approvals, SQLiteApprovalStore)
