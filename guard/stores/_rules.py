"""The rules both backends apply, written once so the memory and SQLite stores cannot drift apart.

Time rule, used everywhere: an entry lives *through* its deadline and is expired once
``deadline < now``. A completed result with ``ttl`` therefore replays until ``now + ttl``
inclusive. Those deadlines are wall-clock times on the caller's ``now``: a result and an approval
must outlive a reboot, and their windows are promises in wall time (a day of replay).

Leases are not: a claim (or lock) is stale once ``leased_at + lease < lease_now`` on the *store's*
lease clock (``guard.stores.leaseclock``), which the processes sharing the store share and no
caller can step, or once it was stamped in another epoch of that clock (before a reboot). A
caller's clock stepping either way therefore neither shortens nor lengthens anyone's lease. A
claim is stamped only by the claim that takes it, never by a reader.
An expired entry behaves exactly as an absent one: ``purge`` only reclaims space, it never changes
an answer.
"""

from __future__ import annotations

import json

from guard.stores.base import ApprovalState, Claim, ClaimState

__all__ = [
    "ABANDONED_RETENTION",
    "CLAIMED",
    "CONFLICT",
    "IN_FLIGHT",
    "STALE",
    "UNKNOWN_MARK",
    "approval_purge_at",
    "claim_deadline",
    "claim_outcome",
    "decision",
    "lease_stale",
    "lock_outcome",
    "outcome_unknown",
]

# Claim is frozen, so the three outcomes that carry no result are shared instead of allocated on
# every call.
CLAIMED = Claim(state=ClaimState.CLAIMED)
IN_FLIGHT = Claim(state=ClaimState.IN_FLIGHT)
CONFLICT = Claim(state=ClaimState.CONFLICT)
STALE = Claim(state=ClaimState.STALE)


def lease_stale(
    *, lease_epoch: str | None, leased_at: float | None, lease: float, clock: tuple[str, float]
) -> bool:
    """Whether a claim stamped ``(lease_epoch, leased_at)`` on the store's lease clock is stale
    by the ``clock`` reading now: its lease ran out, or it was stamped in another epoch (another
    boot: its holder is gone), or not stamped at all (written before leases had a clock)."""
    epoch, lease_now = clock
    return lease_epoch != epoch or leased_at is None or leased_at + lease < lease_now


def claim_outcome(
    *,
    stored_fingerprint: str,
    result: str | None,
    lease_epoch: str | None,
    leased_at: float | None,
    expires_at: float,
    fingerprint: str,
    now: float,
    clock: tuple[str, float],
    lease: float,
    take_stale: bool = True,
) -> Claim | None:
    """What a claim on an existing entry returns, or None if the caller may take the key.

    ``result is None`` marks an in-flight claim, judged by ``lease_stale`` on the store's lease
    ``clock``; a result expires by the caller's ``now``. An expired result is free to take whatever its
    fingerprint, because after a purge it would be gone. A stale claim (its owner died, perhaps
    mid-write) is free only with ``take_stale``: the caller's backend deduplicates by key, so a
    second attempt cannot apply the write twice. Otherwise it is STALE, for the caller to record
    as an unknown outcome (which ``purge`` then keeps, as it keeps every result).
    """
    if result is None:
        if lease_stale(lease_epoch=lease_epoch, leased_at=leased_at, lease=lease, clock=clock):
            if take_stale:
                return None
            return STALE if stored_fingerprint == fingerprint else CONFLICT
        return IN_FLIGHT if stored_fingerprint == fingerprint else CONFLICT
    if expires_at < now:
        return None
    if stored_fingerprint != fingerprint:
        return CONFLICT
    return Claim(state=ClaimState.COMPLETED, result=result)


def lock_outcome(
    *,
    holder: str | None,
    key: str,
    stored_fingerprint: str,
    result: str | None,
    lease_epoch: str | None,
    leased_at: float | None,
    expires_at: float,
    fingerprint: str,
    now: float,
    clock: tuple[str, float],
    lease: float,
) -> Claim | None:
    """What an existing lock answers a claim of ``key``, or None if the claim may take it.

    A lock held by ``key`` itself is free: whether this attempt may run is its own key's claim's
    to say. Otherwise the claim rule applies, stale locks never taken over (the attempt that holds
    it ran under another key, so even a backend that deduplicates by key would run it twice)."""
    if holder == key:
        return None
    outcome = claim_outcome(
        stored_fingerprint=stored_fingerprint,
        result=result,
        lease_epoch=lease_epoch,
        leased_at=leased_at,
        expires_at=expires_at,
        fingerprint=fingerprint,
        now=now,
        clock=clock,
        lease=lease,
        take_stale=False,
    )
    if outcome is None:
        return None
    return Claim(state=outcome.state, result=outcome.result, holder=holder)


UNKNOWN_MARK = '"outcome":"unknown"'
"""How a stored result (``guard.stages.idempotency.stored``: compact JSON) spells an unknown
outcome. Only a result holding it is parsed, so settling a lock costs a substring search."""


def outcome_unknown(result: str) -> bool:
    """Whether a stored result says the write's fate is unknown: then the lock its key holds
    keeps it, else the lock is released."""
    if UNKNOWN_MARK not in result:  # the data may hold the mark too: only parsing can tell
        return False
    try:
        saved = json.loads(result)
    except ValueError:
        return False
    return isinstance(saved, dict) and saved.get("outcome") == "unknown"


ABANDONED_RETENTION = 86_400.0
"""How long a claim outlives its lease before ``purge`` (or Redis's own expiry) may delete it.

A stale claim is evidence: its owner died, maybe mid-write. A caller whose backend cannot
deduplicate is told STALE and records an unknown outcome; if the claim were deleted with its
lease instead, that caller would find the key free and run the write a second time. One day, the
default replay window of a result (``Policy.idempotency_ttl``)."""


def claim_deadline(*, now: float, lease: float) -> float:
    """The stored deadline of a claim taken at ``now``: past the lease, by ``ABANDONED_RETENTION``.

    Staleness is judged on the store's lease clock and the caller's lease, never from this
    deadline, which only says when the entry may be deleted."""
    return now + lease + ABANDONED_RETENTION


def decision(*, approve: bool, expires_at: float, now: float) -> ApprovalState:
    """The state a pending action moves to when someone decides at ``now``."""
    if expires_at < now:
        return ApprovalState.EXPIRED
    return ApprovalState.APPROVED if approve else ApprovalState.DENIED


def approval_purge_at(*, expires_at: float, decided_at: float | None, retention: float) -> float:
    """When an action may be deleted: ``retention`` s after it expired or was decided, if later.

    Keeping decided actions for a while lets the host still look up an approval it is executing
    and lets auditors see recent decisions.
    """
    last = expires_at if decided_at is None else max(expires_at, decided_at)
    return last + retention
