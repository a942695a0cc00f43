"""What only the memory stores promise: memory stays flat, and a hard cap on entries."""

from __future__ import annotations

import pytest

from guard.stores import (
    ApprovalState,
    ClaimState,
    MemoryApprovalStore,
    MemoryCounterStore,
    MemoryIdempotencyStore,
    PendingAction,
)

KEYS = 100_000
STEP = 0.001
"""Seconds between writes: with ttl 1.0 about 1,000 keys are alive at any moment."""


def heap_size(store: MemoryCounterStore | MemoryIdempotencyStore | MemoryApprovalStore) -> int:
    # The expiry heap is private, but it is the part that could grow silently, so look at it.
    return len(store._heap)


def pending(i: int, *, now: float) -> PendingAction:
    return PendingAction(
        id=f"apr_{i}",
        session_id=f"s{i}",
        principal_id="u",
        role="r",
        scopes=(),
        tool="t",
        arguments="{}",
        fingerprint="f",
        proposal_key=f"p{i}",
        call_id=None,
        reason="CONFIRMATION_REQUIRED",
        created_at=now,
        expires_at=now + 1.0,
    )


class TestBounded:
    def test_counters_stay_bounded_as_sessions_come_and_go(self) -> None:
        """100k short-lived counters written over time never pile up beyond those alive."""
        store = MemoryCounterStore()
        for i in range(KEYS):
            store.incr(f"steps:s{i}", now=i * STEP, ttl=1.0)
            assert len(store) < 2_000
        assert heap_size(store) < 2_000

    def test_idempotency_stays_bounded_as_calls_come_and_go(self) -> None:
        """100k claims, completed or released as the pipeline does, never pile up beyond those
        alive. (A claim its owner abandoned is kept ABANDONED_RETENTION: it is evidence.)"""
        store = MemoryIdempotencyStore()
        for i in range(KEYS):
            now = i * STEP
            store.claim(f"k{i}", "f", now=now, lease=1.0)
            if i % 2:
                store.complete(f"k{i}", "f", "{}", now=now, ttl=1.0)
            else:
                store.release(f"k{i}")
            assert len(store) < 2_000
        assert heap_size(store) < 2_000

    def test_approvals_stay_bounded(self) -> None:
        """Expired approvals are swept once their retention has passed."""
        store = MemoryApprovalStore(retention=1.0)
        for i in range(20_000):
            store.create(pending(i, now=i * STEP))
        assert len(store) < 4_000
        assert heap_size(store) < 4_000

    def test_hot_counter_uses_one_heap_item(self) -> None:
        """Refreshing one counter over and over queues it only once."""
        store = MemoryCounterStore()
        for i in range(10_000):
            store.incr("steps:s1", now=i * STEP, ttl=1.0)
        assert len(store) == 1 and heap_size(store) == 1

    def test_reset_churn_does_not_grow_the_heap(self) -> None:
        """A streak counter reset and recreated many times stays one heap item."""
        store = MemoryCounterStore()
        for i in range(10_000):
            store.incr("invalid:s1", now=i * STEP, ttl=86_400.0)
            store.reset("invalid:s1")
        assert heap_size(store) == 1

    def test_refreshed_counter_survives_its_first_deadline(self) -> None:
        """The sweep re-queues a counter refreshed since it was queued instead of deleting it."""
        store = MemoryCounterStore()
        store.incr("hot", now=0.0, ttl=1.0)
        store.incr("hot", now=0.9, ttl=1.0)
        store.incr("other", now=1.5, ttl=1.0)
        assert store.get("hot", now=1.5) == 2


class TestMaxEntries:
    def test_cap_is_never_exceeded(self) -> None:
        """With long ttls the store holds at most max_entries keys."""
        store = MemoryCounterStore(max_entries=100)
        for i in range(1_000):
            store.incr(f"k{i}", now=0.0, ttl=1_000.0 + i)
        assert len(store) == 100

    def test_cap_evicts_the_entry_due_soonest(self) -> None:
        """A full store drops the entry that would have expired first."""
        store = MemoryCounterStore(max_entries=2)
        store.incr("soon", now=0.0, ttl=10.0)
        store.incr("late", now=0.0, ttl=100.0)
        store.incr("new", now=0.0, ttl=50.0)
        assert store.get("soon", now=0.0) == 0
        assert store.get("late", now=0.0) == 1 and store.get("new", now=0.0) == 1

    def test_cap_evicts_by_current_deadline(self) -> None:
        """An entry refreshed since it was queued is judged by its new deadline."""
        store = MemoryCounterStore(max_entries=2)
        store.incr("refreshed", now=0.0, ttl=10.0)
        store.incr("other", now=0.0, ttl=50.0)
        store.incr("refreshed", now=5.0, ttl=100.0)
        store.incr("new", now=5.0, ttl=60.0)
        assert store.get("other", now=5.0) == 0
        assert store.get("refreshed", now=5.0) == 2

    def test_cap_on_idempotency_keeps_the_newest_claims(self) -> None:
        """Evicting old claims leaves the latest ones held."""
        store = MemoryIdempotencyStore(max_entries=10)
        for i in range(100):
            store.claim(f"k{i}", "f", now=float(i), lease=60.0)
        assert len(store) == 10
        assert store.claim("k99", "f", now=100.0, lease=60.0).state is ClaimState.IN_FLIGHT

    def test_cap_on_approvals_keeps_the_index_consistent(self) -> None:
        """An evicted approval disappears from find_pending as well."""
        store = MemoryApprovalStore(max_entries=1)
        store.create(pending(1, now=0.0))
        store.create(pending(2, now=0.0))
        assert store.get("apr_1") is None and store.find_pending("p1", now=0.0) is None
        found = store.find_pending("p2", now=0.0)
        assert found is not None and found.state is ApprovalState.PENDING

    @pytest.mark.parametrize("cls", [MemoryCounterStore, MemoryIdempotencyStore])
    def test_cap_below_one_is_rejected(
        self, cls: type[MemoryCounterStore] | type[MemoryIdempotencyStore]
    ) -> None:
        """max_entries must allow at least one entry."""
        with pytest.raises(ValueError, match="max_entries"):
            cls(max_entries=0)
