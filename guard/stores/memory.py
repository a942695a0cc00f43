"""In-memory stores: one process, thread-safe, bounded by expiry and by a hard cap on entries.

Each store is a plain dict guarded by one lock. Memory stays flat as sessions come and go because
every entry carries a deadline and a min-heap of deadlines is swept a little on every write:

- a key has at most one heap item (``_queued`` tracks which), pushed when the key is first
  inserted, so refreshing a hot counter costs no heap work at all;
- when an item comes due, its entry is deleted if it really expired, or re-queued at its current
  deadline if it was refreshed meanwhile; an item whose key is already gone is dropped;
- each write pops at most ``_SWEEP_BATCH`` items, so a mass expiry is spread over many calls
  instead of stalling one.

``max_entries`` is a safety net for floods and misconfigured TTLs. A full store first sweeps every
entry that is due; if it is still full it refuses the new key (``StoreFull``) and never evicts a
live one: entries are taint marks, limits, claims, results and pending approvals, and evicting
them on other sessions' traffic would let a tainted session write without a human, reset a daily
limit or run a write twice. The counter store also refuses new *sessions* earlier
(``admits``, at ``session_share`` of the cap), so the sessions it holds keep room to work.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from guard.stores._rules import (
    ABANDONED_RETENTION,
    CLAIMED,
    approval_purge_at,
    claim_outcome,
    decision,
    lease_stale,
    lock_outcome,
    outcome_unknown,
)
from guard.stores.base import (
    ApprovalState,
    ApprovalStore,
    Ceiling,
    Claim,
    CounterStore,
    IdempotencyStore,
    KeyRecord,
    OneStepCounters,
    PendingAction,
    StoreFull,
)
from guard.stores.leaseclock import LeaseClock, process_lease_clock

__all__ = ["MemoryApprovalStore", "MemoryCounterStore", "MemoryIdempotencyStore"]

_SWEEP_BATCH = 64
"""Heap items one write may pop: enough to outpace insertions (at most one per write)."""

DEFAULT_MAX_ENTRIES = 1_000_000


class _Entry(Protocol):
    expires_at: float


_E = TypeVar("_E", bound=_Entry)


class _ExpiringMap(Generic[_E]):
    """A dict of entries with deadlines, swept lazily in deadline order and capped in size.

    Subclass methods take ``self._lock`` themselves and call the ``_``-methods below under it.
    """

    __slots__ = ("_entries", "_heap", "_lock", "_max_entries", "_queued")

    def __init__(self, *, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self._lock = threading.Lock()
        self._entries: dict[str, _E] = {}
        self._heap: list[tuple[float, str]] = []
        self._queued: set[str] = set()
        self._max_entries = max_entries

    def __len__(self) -> int:
        """Entries held, including expired ones not swept yet: what the memory bound is about."""
        return len(self._entries)

    def _tick(self, now: float) -> None:
        # The common case is one comparison: nothing is due.
        if self._heap and self._heap[0][0] < now:
            self._sweep(now, _SWEEP_BATCH)

    def _sweep(self, now: float, budget: int) -> int:
        """Pop up to ``budget`` due heap items; returns how many entries were deleted."""
        heap, entries, removed = self._heap, self._entries, 0
        while budget > 0 and heap and heap[0][0] < now:
            budget -= 1
            _, key = heappop(heap)
            entry = entries.get(key)
            if entry is None:
                self._queued.discard(key)
            elif (deadline := self._deadline(entry)) < now:
                self._delete(key, entry)
                self._queued.discard(key)
                removed += 1
            else:  # re-examined within a day: an entry may be kept with no deadline (``inf``)
                heappush(heap, (min(deadline, now + ABANDONED_RETENTION), key))
        return removed

    def _deadline(self, entry: _E) -> float:
        """When ``entry`` may be deleted. Items are queued at ``expires_at`` and re-queued here when
        they come due, so a store may keep some entries past it without the heap ever holding a
        deadline later than the entry's."""
        return entry.expires_at

    def _put(self, key: str, entry: _E, now: float) -> None:
        """Insert ``entry`` under a key that has none; a full store sweeps what is due, then refuses."""
        if len(self._entries) >= self._max_entries:
            self._sweep(now, len(self._heap))
            if len(self._entries) >= self._max_entries:
                raise StoreFull(
                    f"{type(self).__name__} holds {self._max_entries} live entries (max_entries)"
                )
        self._entries[key] = entry
        if key not in self._queued:
            self._queued.add(key)
            heappush(self._heap, (entry.expires_at, key))

    def _purge(self, now: float) -> int:
        with self._lock:
            removed = self._sweep(now, len(self._heap))
            # The heap may hold a deadline later than the entry's (a refresh with a shorter ttl),
            # so a full scan makes purge exact; it is an explicit, occasional call.
            dead = [(k, e) for k, e in self._entries.items() if self._deadline(e) < now]
            for key, entry in dead:
                self._delete(key, entry)
            return removed + len(dead)

    def _delete(self, key: str, entry: _E) -> None:
        """Remove ``key``; its heap item, if any, is dropped when it comes due."""
        del self._entries[key]


class _Record:
    __slots__ = (
        "claimed_at",
        "expires_at",
        "fingerprint",
        "holder",
        "lease_epoch",
        "leased_at",
        "lock",
        "result",
    )

    def __init__(
        self,
        fingerprint: str,
        result: str | None,
        claimed_at: float,
        expires_at: float,
        *,
        leased: tuple[str, float] | None = None,
        lock: str | None = None,
        holder: str | None = None,
    ) -> None:
        self.fingerprint = fingerprint
        self.result = result
        """None while the key is claimed and in flight."""
        self.claimed_at = claimed_at
        # The claim's stamp on the store's lease clock (``guard.stores.leaseclock``).
        self.lease_epoch: str | None = None if leased is None else leased[0]
        self.leased_at: float | None = None if leased is None else leased[1]
        self.expires_at = expires_at
        """The end of the lease while claimed, of replay once completed."""
        self.lock = lock
        """On a claim: the lock it holds, settled with it."""
        self.holder = holder
        """On a lock: the key of the claim holding it."""


class MemoryIdempotencyStore(_ExpiringMap[_Record]):
    """Claims and results in a dict; see ``guard.stores._rules`` for the expiry and claim rules.

    Leases are judged on ``lease_clock``, by default the process's monotonic clock, never on the
    callers' ``now``."""

    __slots__ = ("_lease_clock",)

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        lease_clock: LeaseClock = process_lease_clock,
    ) -> None:
        super().__init__(max_entries=max_entries)
        self._lease_clock = lease_clock

    def claim(
        self,
        key: str,
        fingerprint: str,
        *,
        now: float,
        lease: float,
        take_stale: bool = True,
        lock: str | None = None,
    ) -> Claim:
        with self._lock:
            self._tick(now)
            clock = self._lease_clock()  # under the lock: stamps follow the order claims happen
            entries = self._entries
            record = entries.get(key)
            held = None if lock is None else entries.get(lock)
            if record is not None:
                outcome = claim_outcome(
                    stored_fingerprint=record.fingerprint,
                    result=record.result,
                    lease_epoch=record.lease_epoch,
                    leased_at=record.leased_at,
                    expires_at=record.expires_at,
                    fingerprint=fingerprint,
                    now=now,
                    clock=clock,
                    lease=lease,
                    take_stale=take_stale,
                )
                if outcome is not None:
                    return outcome
            if held is not None:
                refused = lock_outcome(
                    holder=held.holder,
                    key=key,
                    stored_fingerprint=held.fingerprint,
                    result=held.result,
                    lease_epoch=held.lease_epoch,
                    leased_at=held.leased_at,
                    expires_at=held.expires_at,
                    fingerprint=fingerprint,
                    now=now,
                    clock=clock,
                    lease=lease,
                )
                if refused is not None:
                    return refused
            # New entries first, so a full store refuses before anything changed.
            if record is None:
                fresh = _Record(fingerprint, None, now, now + lease, leased=clock, lock=lock)
                self._put(key, fresh, now)
            if lock is not None and held is None:
                try:
                    taken = _Record(fingerprint, None, now, now + lease, leased=clock, holder=key)
                    self._put(lock, taken, now)
                except StoreFull:
                    if record is None:
                        self._delete(key, entries[key])
                    raise
            for entry in (record, held):
                if entry is not None:
                    entry.fingerprint, entry.result = fingerprint, None
                    entry.claimed_at, entry.expires_at = now, now + lease
                    entry.lease_epoch, entry.leased_at = clock
            if record is not None:
                record.lock = lock
            if held is not None:
                held.holder = key
            return CLAIMED

    def complete(self, key: str, fingerprint: str, result: str, *, now: float, ttl: float) -> None:
        with self._lock:
            self._tick(now)
            record = self._entries.get(key)
            if record is None:
                self._put(key, _Record(fingerprint, result, now, now + ttl), now)
                return
            record.fingerprint, record.result, record.expires_at = fingerprint, result, now + ttl
            if (held := self._held_by(key, record)) is None:
                return
            if outcome_unknown(result):
                held[1].result, held[1].expires_at = result, now + ttl
            else:
                self._delete(*held)

    def release(self, key: str) -> None:
        with self._lock:
            record = self._entries.get(key)
            if record is not None and record.result is None:
                if (held := self._held_by(key, record)) is not None:
                    self._delete(*held)
                self._delete(key, record)

    def _held_by(self, key: str, record: _Record) -> tuple[str, _Record] | None:
        """The in-flight lock ``key``'s claim holds (its name and entry), if it still holds one."""
        if record.lock is None:
            return None
        held = self._entries.get(record.lock)
        if held is None or held.holder != key or held.result is not None:
            return None
        return record.lock, held

    def _deadline(self, entry: _Record) -> float:
        # A claim whose lease ran out with no result was abandoned, maybe mid-write: it is kept as
        # evidence (``ABANDONED_RETENTION``), never swept with its lease.
        if entry.result is None:
            # ... and kept a day on the lease clock too: a caller's clock far ahead must not
            # delete a live claim (its key would then be free for a second write).
            clock = self._lease_clock()
            if lease_stale(
                lease_epoch=entry.lease_epoch,
                leased_at=entry.leased_at,
                lease=ABANDONED_RETENTION,
                clock=clock,
            ):
                return entry.expires_at + ABANDONED_RETENTION
            return math.inf
        return entry.expires_at

    def purge(self, now: float) -> int:
        return self._purge(now)

    def record(self, key: str) -> KeyRecord | None:
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else _key_record(key, entry)

    def unknown(self, *, now: float) -> list[KeyRecord]:
        with self._lock:
            return [
                _key_record(key, entry)
                for key, entry in self._entries.items()
                if entry.result is not None
                and not entry.expires_at < now
                and outcome_unknown(entry.result)
            ]


def _key_record(key: str, entry: _Record) -> KeyRecord:
    return KeyRecord(
        key=key,
        fingerprint=entry.fingerprint,
        result=entry.result,
        claimed_at=entry.claimed_at,
        expires_at=entry.expires_at,
        holder=entry.holder,
    )


class _Held:
    __slots__ = ("action", "expires_at")

    def __init__(self, action: PendingAction, expires_at: float) -> None:
        self.action = action
        self.expires_at = expires_at
        """When the action may be purged (``approval_purge_at``), not when it stops being valid."""


class MemoryApprovalStore(_ExpiringMap[_Held]):
    """Pending actions in a dict, indexed by proposal key; decided ones kept for ``retention`` s."""

    __slots__ = ("_by_proposal", "_retention")

    def __init__(self, *, retention: float = 86_400.0, max_entries: int = 100_000) -> None:
        super().__init__(max_entries=max_entries)
        self._retention = retention
        # Ids in creation order; usually one per proposal, since a repeat finds the pending one.
        self._by_proposal: dict[str, list[str]] = {}

    def create(self, action: PendingAction) -> None:
        with self._lock:
            self._create(action)

    def file(self, action: PendingAction, *, now: float) -> PendingAction:
        with self._lock:
            found = self._pending(action.proposal_key, now)
            if found is not None:
                return found
            self._create(action)
            return action

    def get(self, approval_id: str) -> PendingAction | None:
        with self._lock:
            held = self._entries.get(approval_id)
            return None if held is None else held.action

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def find_pending(self, proposal_key: str, *, now: float) -> PendingAction | None:
        with self._lock:
            return self._pending(proposal_key, now)

    def filed(self, proposal_key: str) -> list[PendingAction]:
        with self._lock:
            ids = self._by_proposal.get(proposal_key, ())
            return [self._entries[approval_id].action for approval_id in ids]

    def decide(
        self, approval_id: str, *, approve: bool, by: str, now: float
    ) -> PendingAction | None:
        with self._lock:
            held = self._entries.get(approval_id)
            if held is None:
                return None
            if held.action.state is not ApprovalState.PENDING:
                return held.action
            state = decision(approve=approve, expires_at=held.action.expires_at, now=now)
            # Nobody decided an expired action; the approver merely arrived too late.
            decided_by = None if state is ApprovalState.EXPIRED else by
            held.action = held.action.decided(state, by=decided_by, at=now)
            held.expires_at = approval_purge_at(
                expires_at=held.action.expires_at, decided_at=now, retention=self._retention
            )
            return held.action

    def purge(self, now: float) -> int:
        return self._purge(now)

    def _create(self, action: PendingAction) -> None:
        self._tick(action.created_at)
        if action.id in self._entries:
            raise ValueError(f"approval id {action.id!r} already exists")
        purge_at = approval_purge_at(
            expires_at=action.expires_at,
            decided_at=action.decided_at,
            retention=self._retention,
        )
        self._put(action.id, _Held(action, purge_at), action.created_at)
        self._by_proposal.setdefault(action.proposal_key, []).append(action.id)

    def _pending(self, proposal_key: str, now: float) -> PendingAction | None:
        for approval_id in reversed(self._by_proposal.get(proposal_key, ())):
            action = self._entries[approval_id].action
            if action.state is ApprovalState.PENDING and not action.expires_at < now:
                return action
        return None

    def _delete(self, key: str, entry: _Held) -> None:
        super()._delete(key, entry)
        proposal_key = entry.action.proposal_key
        ids = self._by_proposal[proposal_key]
        ids.remove(key)
        if not ids:
            del self._by_proposal[proposal_key]


class _Counter:
    __slots__ = ("expires_at", "value")

    def __init__(self, value: int, expires_at: float) -> None:
        self.value = value
        self.expires_at = expires_at


class MemoryCounterStore(OneStepCounters, _ExpiringMap[_Counter]):
    """Counters in a dict, updated in place so the hot path allocates nothing for a known key.

    ``session_share`` of ``max_entries`` is where new sessions stop being admitted; the rest is
    headroom for the new keys of sessions already held (a new turn, a new loop fingerprint)."""

    __slots__ = ("_admit_below",)

    def __init__(
        self, *, max_entries: int = DEFAULT_MAX_ENTRIES, session_share: float = 0.9
    ) -> None:
        super().__init__(max_entries=max_entries)
        if not 0.0 < session_share <= 1.0:
            raise ValueError(f"session_share must be in (0, 1], got {session_share}")
        self._admit_below = max(1, int(max_entries * session_share))

    def admits(self, key: str, *, now: float) -> bool:
        if key in self._entries or len(self._entries) < self._admit_below:
            return True  # the common case, without the lock: a dict lookup and a length
        with self._lock:
            self._sweep(now, len(self._heap))
            return key in self._entries or len(self._entries) < self._admit_below

    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int:
        with self._lock:
            if (heap := self._heap) and heap[0][0] < now:  # _tick inlined: four calls per call
                self._sweep(now, _SWEEP_BATCH)
            counter = self._entries.get(key)
            if counter is None:
                self._put(key, _Counter(amount, now + ttl), now)
                return amount
            counter.value = amount if counter.expires_at < now else counter.value + amount
            counter.expires_at = now + ttl
            return counter.value

    def get(self, key: str, *, now: float) -> int:
        with self._lock:
            counter = self._entries.get(key)
            if counter is None or counter.expires_at < now:
                return 0
            return counter.value

    def ceilings(self, ceilings: Sequence[Ceiling], *, now: float) -> list[int]:
        # Every call counts its budget here: one lock and no method call per ceiling (``incr``
        # and ``get`` inlined) keep the in-process read path cheap.
        values: list[int] = []
        with self._lock:
            if (heap := self._heap) and heap[0][0] < now:
                self._sweep(now, _SWEEP_BATCH)
            entries = self._entries
            for ceiling in ceilings:
                counter, ttl = entries.get(ceiling.key), ceiling.ttl
                if ttl is None:  # read only
                    value = 0 if counter is None or counter.expires_at < now else counter.value
                elif counter is None:
                    value = 1
                    self._put(ceiling.key, _Counter(1, now + ttl), now)
                else:
                    value = 1 if counter.expires_at < now else counter.value + 1
                    counter.value, counter.expires_at = value, now + ttl
                values.append(value)
                if value > ceiling.limit:
                    break
        return values

    def reset(self, key: str) -> None:
        with self._lock:
            counter = self._entries.get(key)
            if counter is not None:
                self._delete(key, counter)

    def add_within(self, key: str, amount: int, limit: int, *, now: float, ttl: float) -> bool:
        with self._lock:
            self._tick(now)
            counter = self._entries.get(key)
            current = 0 if counter is None or counter.expires_at < now else counter.value
            if current + amount > limit:
                return False
            if counter is None:
                self._put(key, _Counter(amount, now + ttl), now)
            else:
                counter.value, counter.expires_at = current + amount, now + ttl
            return True

    def purge(self, now: float) -> int:
        return self._purge(now)


if TYPE_CHECKING:
    # Protocols are structural: these lines make mypy prove each class still fits its protocol.
    _idempotency: type[IdempotencyStore] = MemoryIdempotencyStore
    _approvals: type[ApprovalStore] = MemoryApprovalStore
    _counters: type[CounterStore] = MemoryCounterStore
