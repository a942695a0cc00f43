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
    StoreFull,
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
    """At the cap a memory store refuses new keys; it never evicts a live entry to make room."""

    def test_cap_is_never_exceeded_and_nothing_live_is_evicted(self) -> None:
        """With long ttls the store holds max_entries keys, refuses the rest, and keeps the first."""
        store = MemoryCounterStore(max_entries=100)
        refused = 0
        for i in range(1_000):
            try:
                store.incr(f"k{i}", now=0.0, ttl=1_000.0 + i)
            except StoreFull:
                refused += 1
        assert len(store) == 100 and refused == 900
        assert all(store.get(f"k{i}", now=0.0) == 1 for i in range(100))

    def test_a_full_store_makes_room_from_expired_entries_only(self) -> None:
        """A full store sweeps what is due, so an expired entry gives way, a live one never does."""
        store = MemoryCounterStore(max_entries=2)
        store.incr("soon", now=0.0, ttl=10.0)
        store.incr("late", now=0.0, ttl=100.0)
        with pytest.raises(StoreFull):
            store.incr("new", now=5.0, ttl=50.0)
        store.incr("new", now=11.0, ttl=50.0)
        assert store.get("late", now=11.0) == 1 and store.get("new", now=11.0) == 1

    def test_known_keys_still_count_at_the_cap(self) -> None:
        """A full store still updates the keys it holds."""
        store = MemoryCounterStore(max_entries=1)
        store.incr("k", now=0.0, ttl=10.0)
        assert store.incr("k", now=1.0, ttl=10.0) == 2
        assert store.add_within("k", 3, 10, now=1.0, ttl=10.0) is True

    def test_cap_on_idempotency_keeps_every_claim_and_result(self) -> None:
        """A flood of new claims is refused; the claims and results held stay held."""
        store = MemoryIdempotencyStore(max_entries=10)
        for i in range(10):
            store.claim(f"k{i}", "f", now=float(i), lease=60.0)
        store.complete("k0", "f", '"paid"', now=10.0, ttl=3600.0)
        with pytest.raises(StoreFull):
            store.claim("k-new", "f", now=11.0, lease=60.0)
        assert store.claim("k0", "f", now=12.0, lease=60.0).result == '"paid"'
        assert store.claim("k9", "f", now=12.0, lease=60.0).state is ClaimState.IN_FLIGHT

    def test_cap_on_approvals_keeps_the_pending_one(self) -> None:
        """A full approval store refuses a new action; the pending one stays findable."""
        store = MemoryApprovalStore(max_entries=1)
        store.create(pending(1, now=0.0))
        with pytest.raises(StoreFull):
            store.create(pending(2, now=0.0))
        found = store.find_pending("p1", now=0.0)
        assert found is not None and found.state is ApprovalState.PENDING


class TestAdmission:
    """The counter store stops admitting new sessions before its cap, keeping headroom."""

    def test_new_keys_are_admitted_below_the_session_share(self) -> None:
        """Below session_share of the cap any key is admitted; above it only keys it holds."""
        store = MemoryCounterStore(max_entries=10, session_share=0.5)
        for i in range(5):
            assert store.admits(f"steps:s{i}", now=0.0)
            store.incr(f"steps:s{i}", now=0.0, ttl=100.0)
        assert not store.admits("steps:new", now=0.0)
        assert store.admits("steps:s0", now=0.0)
        for i in range(5):  # the admitted sessions keep room for their own new keys
            store.incr(f"turn:s{i}:2", now=0.0, ttl=100.0)
        assert len(store) == 10

    def test_admission_returns_once_sessions_expire(self) -> None:
        """Expired sessions are swept when admission is asked, so the store admits again."""
        store = MemoryCounterStore(max_entries=2, session_share=0.5)
        store.incr("steps:old", now=0.0, ttl=10.0)
        assert not store.admits("steps:new", now=5.0)
        assert store.admits("steps:new", now=11.0)

    @pytest.mark.parametrize("share", [0.0, -1.0, 1.5])
    def test_session_share_must_be_a_fraction(self, share: float) -> None:
        """session_share outside (0, 1] is a configuration error."""
        with pytest.raises(ValueError, match="session_share"):
            MemoryCounterStore(session_share=share)

    @pytest.mark.parametrize("cls", [MemoryCounterStore, MemoryIdempotencyStore])
    def test_cap_below_one_is_rejected(
        self, cls: type[MemoryCounterStore] | type[MemoryIdempotencyStore]
    ) -> None:
        """max_entries must allow at least one entry."""
        with pytest.raises(ValueError, match="max_entries"):
            cls(max_entries=0)
