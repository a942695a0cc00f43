"""The rules both backends apply, written once so the memory and SQLite stores cannot drift apart.

Time rule, used everywhere: an entry lives *through* its deadline and is expired once
``deadline < now``. A completed result with ``ttl`` therefore replays until ``now + ttl``
inclusive, and a claim is stale once ``claimed_at + lease < now`` (``now - claimed_at > lease``).
An expired entry behaves exactly as an absent one: ``purge`` only reclaims space, it never changes
an answer.
"""

from __future__ import annotations

from guard.stores.base import ApprovalState, Claim, ClaimState

__all__ = [
    "CLAIMED",
    "CONFLICT",
    "IN_FLIGHT",
    "approval_purge_at",
    "claim_outcome",
    "decision",
]

# Claim is frozen, so the three outcomes that carry no result are shared instead of allocated on
# every call.
CLAIMED = Claim(state=ClaimState.CLAIMED)
IN_FLIGHT = Claim(state=ClaimState.IN_FLIGHT)
CONFLICT = Claim(state=ClaimState.CONFLICT)


def claim_outcome(
    *,
    stored_fingerprint: str,
    result: str | None,
    claimed_at: float,
    expires_at: float,
    fingerprint: str,
    now: float,
    lease: float,
) -> Claim | None:
    """What a claim on an existing entry returns, or None if the caller may take the key.

    ``result is None`` marks an in-flight claim. A stale claim (its owner crashed) and an expired
    result are free to take whatever their fingerprint, because after a purge they would be gone.
    """
    if result is None:
        if claimed_at + lease < now:
            return None
        return IN_FLIGHT if stored_fingerprint == fingerprint else CONFLICT
    if expires_at < now:
        return None
    if stored_fingerprint != fingerprint:
        return CONFLICT
    return Claim(state=ClaimState.COMPLETED, result=result)


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
