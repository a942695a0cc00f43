"""Store protocols: the pipeline's only shared state, injected so hosts choose durability.

Each protocol has an in-memory implementation (one process, bounded by expiry), a SQLite one
(durable across restarts, safe for several processes on one host), and a Redis one in
``guard.stores.redis`` (shared by several hosts; needs the optional ``redis`` package).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Protocol

__all__ = [
    "PENDING_ACTION_FIELDS",
    "ApprovalState",
    "ApprovalStore",
    "Ceiling",
    "Claim",
    "ClaimAsk",
    "ClaimState",
    "ClaimsAfterCounting",
    "CounterStore",
    "DecidesThenClaims",
    "IdempotencyStore",
    "KeyRecord",
    "OneStepCounters",
    "PendingAction",
    "StoreFull",
]


class StoreFull(Exception):
    """A store at its cap refused a new key. Stores never evict live entries to make room: taint
    marks, limits, claims, results and pending approvals are security state, and another
    session's traffic must not be able to push them out."""


class ClaimState(StrEnum):
    CLAIMED = "claimed"
    """The caller owns the key now and must complete or release it."""
    IN_FLIGHT = "in_flight"
    """Another caller owns the key and has not finished."""
    COMPLETED = "completed"
    """The write finished; ``Claim.result`` holds its stored result to replay."""
    CONFLICT = "conflict"
    """The key is known with a different fingerprint (other arguments)."""
    STALE = "stale"
    """Another caller claimed the key and its lease ran out with no result: it died, perhaps in
    the middle of the write. Returned only to a caller that may not take stale claims over
    (``take_stale=False``: its backend cannot deduplicate, so running again could apply it twice)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Claim:
    state: ClaimState
    result: str | None = None
    """The stored result (JSON text) when ``state`` is COMPLETED."""
    holder: str | None = None
    """Set when the answer is the ``lock``'s, not the key's: the key of the attempt holding it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KeyRecord:
    """What the idempotency store holds under one key, for a human's listing (``callgate outcomes``)."""

    key: str
    fingerprint: str
    result: str | None
    """The stored result (JSON text); None while the key is claimed and in flight."""
    claimed_at: float
    """When the attempt that wrote it claimed the key (or when the result was recorded)."""
    expires_at: float
    """The end of the lease while claimed, of replay once completed."""
    holder: str | None = None
    """On an actor's lock: the key of the attempt holding it."""


class IdempotencyStore(Protocol):
    """Claims and results of writes, keyed by idempotency key."""

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
        """Atomically take ``key`` unless someone holds it (for less than ``lease`` s) or it completed.

        A stale claim (held longer than ``lease``) is taken over when ``take_stale``; otherwise the
        answer is STALE (same fingerprint) or CONFLICT, and the stale claim is left as it is.

        With ``lock`` (a key wider than ``key``: the actor's, across sessions) the claim also
        takes the lock, in the same atomic step. A lock held by another key answers instead, with
        ``Claim.holder`` naming that key: IN_FLIGHT while its lease runs, STALE once it ran out
        (never taken over: the other attempt's backend key differs), COMPLETED with the unknown
        outcome recorded on it, CONFLICT for other arguments; nothing is written then. A lock held
        by ``key`` itself is free (this attempt takes its own key over). ``complete`` and
        ``release`` of ``key`` settle the lock it holds."""

    def complete(self, key: str, fingerprint: str, result: str, *, now: float, ttl: float) -> None:
        """Record the result of ``key`` (upsert), replayable until ``now + ttl``.

        The lock ``key`` holds, if any, is released when the result's outcome is known (applied or
        not), and keeps the result until ``now + ttl`` when it is unknown (``outcome_unknown``):
        every later claim of the lock, from any session, is then told the same."""

    def release(self, key: str) -> None:
        """Give up a claim and the lock it holds: nothing happened, a later identical call may run."""

    def purge(self, now: float) -> int:
        """Delete expired entries; returns how many."""

    def record(self, key: str) -> KeyRecord | None:
        """What ``key`` holds (claim, result or lock), expired or not; None if nothing."""

    def unknown(self, *, now: float) -> list[KeyRecord]:
        """Every unexpired key, claim or lock, whose stored result says the outcome is unknown
        (``outcome_unknown``), in any order: what a human settles. A scan: for operators, not
        for the call path."""


class ApprovalState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingAction:
    """A high-risk call held server-side until a human decides. The model never sees the store."""

    id: str
    """The approval id the host shows the approver."""
    session_id: str
    principal_id: str
    role: str
    scopes: tuple[str, ...]
    tool: str
    arguments: str
    """The validated arguments, canonical JSON: exactly what the approver sees and what will run."""
    fingerprint: str
    """Hash of tool and arguments; approval is bound to it."""
    proposal_key: str
    """The idempotency key of the proposal; a repeated proposal finds this action again."""
    call_id: str | None
    reason: str
    """Why a human is asked: the code (CONFIRMATION_REQUIRED or TAINTED_CONTEXT)."""
    created_at: float
    expires_at: float
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str | None = None
    decided_at: float | None = None
    authenticated: bool = True
    """Whether the session had identified its user when the call was proposed: an approved call
    runs as it was proposed, so an anonymous session's write stays anonymous."""
    warnings: str = "[]"
    """The warnings the checks raised on the proposal, JSON (``[{"code", "message"}]``): the
    approver reads them before deciding."""
    sensitive: tuple[str, ...] = ()
    """Argument names the tool marks sensitive: approvers' listings mask their values, the
    executor reads ``arguments`` as they are."""
    seal: str = ""
    """Keyed MAC of every fact above but the decision (``guard.stages.confirm``), checked before
    the approved call runs: whoever can write the store cannot change what runs."""

    def decided(self, state: ApprovalState, *, by: str | None, at: float) -> PendingAction:
        # Spelled out rather than dataclasses.replace, which introspects the fields on every call
        # (twice the cost, on every approval); a test keeps the two equal.
        return PendingAction(
            id=self.id,
            session_id=self.session_id,
            principal_id=self.principal_id,
            role=self.role,
            scopes=self.scopes,
            tool=self.tool,
            arguments=self.arguments,
            fingerprint=self.fingerprint,
            proposal_key=self.proposal_key,
            call_id=self.call_id,
            reason=self.reason,
            created_at=self.created_at,
            expires_at=self.expires_at,
            state=state,
            decided_by=by,
            decided_at=at,
            authenticated=self.authenticated,
            warnings=self.warnings,
            sensitive=self.sensitive,
            seal=self.seal,
        )


PENDING_ACTION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(PendingAction))
"""The fields of a pending action in declaration order: the column order the durable stores use."""


class ApprovalStore(Protocol):
    """Pending actions and their decisions."""

    def create(self, action: PendingAction) -> None:
        """Store a new pending action."""

    def get(self, approval_id: str) -> PendingAction | None:
        """The action, whatever its state; None if unknown."""

    def ids(self) -> list[str]:
        """The ids of every action the store holds, in any state (for approvers' listings)."""

    def find_pending(self, proposal_key: str, *, now: float) -> PendingAction | None:
        """An unexpired pending action for this proposal, so a repeated proposal reuses it."""

    def file(self, action: PendingAction, *, now: float) -> PendingAction:
        """``find_pending(action.proposal_key)``, else ``create(action)``, in one atomic step (one
        round trip on Redis): the pending action found, or ``action`` once stored. Two identical
        proposals racing therefore file one action."""

    def filed(self, proposal_key: str) -> list[PendingAction]:
        """Every action held under this proposal, in any state, oldest first.

        Adapters find the action a decision was shown for by its call id among these, so a late
        decision reaches the expired action it was about, never a newer one."""

    def decide(
        self, approval_id: str, *, approve: bool, by: str, now: float
    ) -> PendingAction | None:
        """Atomically move PENDING to APPROVED or DENIED (EXPIRED if past its expiry).

        Returns the action as it stands afterwards; an action already decided is returned unchanged,
        so two approvers racing get one decision. None if unknown.
        """

    def purge(self, now: float) -> int:
        """Delete actions decided or expired long ago; returns how many."""


@dataclass(slots=True)
class Ceiling:
    """A counter a call counts itself on (``ttl`` set) or only reads (``ttl`` None), and the value
    over which it must stop: the budget's steps, turns, rate and invalid streak, the loop counter.

    Nothing may change one: the budget stage shares a session's across its calls. Not frozen
    all the same, since calls still build some, and a frozen dataclass's ``__init__``
    (``object.__setattr__`` per field) costs 2.7x a plain one's."""

    key: str
    limit: int
    """The call stops once the counter's value is over this."""
    ttl: float | None = None
    """Add 1 with this expiry; None: read the value (0 if absent or expired), change nothing."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimAsk:
    """A claim a write will make (``IdempotencyStore.claim``'s arguments), asked ahead: a store
    that can make it with the counts before it (``ClaimsAfterCounting``) saves the write a wait."""

    key: str
    fingerprint: str
    lease: float
    take_stale: bool
    lock: str | None

    def claim_on(self, store: IdempotencyStore, *, now: float) -> Claim:
        """``store.claim`` as asked."""
        return store.claim(
            self.key,
            self.fingerprint,
            now=now,
            lease=self.lease,
            take_stale=self.take_stale,
            lock=self.lock,
        )


class ClaimsAfterCounting(Protocol):
    """An idempotency store that counts a call's ceilings and then claims, in one step (Redis: one
    script, one round trip). Optional: the pipeline looks for ``claim_after`` and otherwise counts
    and claims in two steps, as every store can."""

    def claim_after(
        self, counters: CounterStore, ceilings: Sequence[Ceiling], ask: ClaimAsk, *, now: float
    ) -> tuple[list[int], Claim | None]:
        """``counters.ceilings(ceilings)``, then, only if every ceiling was reached and none is
        over its limit, ``claim`` as ``ask`` says: the values, and the claim (None if not made)."""


class DecidesThenClaims(Protocol):
    """An approval store that decides and, when the action stands approved, makes its run's claim
    in one step (Redis: one script, one round trip). Optional, as ``ClaimsAfterCounting``."""

    def decide_then_claim(
        self,
        approval_id: str,
        *,
        approve: bool,
        by: str,
        now: float,
        idempotency: IdempotencyStore,
        ask: ClaimAsk,
    ) -> tuple[PendingAction | None, Claim | None]:
        """``decide``, then, only if the action stands approved afterwards, ``idempotency.claim``
        as ``ask`` says: the action as it stands (None if unknown), and the claim (None if not
        made)."""


class CounterStore(Protocol):
    """Integer counters with expiry: steps, rate windows, loops, streaks, daily sums, session marks."""

    batches: bool
    """True when every call waits on a server (Redis): the pipeline then gathers the budget's
    ceilings with the loop counter, so a call's counts cost one wait (``Guard``). False for a
    store whose calls are local steps: batching would only cost work."""

    def admits(self, key: str, *, now: float) -> bool:
        """Whether ``key`` exists, or a new key fits below the store's admission limit.

        The budget stage asks before a session's first counter: at the limit new sessions are
        refused (SESSION_LIMIT) while the sessions already held keep room for their own state."""

    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int:
        """Add ``amount`` (creating the counter at 0) and return the new value; expiry is reset.

        May raise ``StoreFull`` for a new key (memory store at its cap); never evicts another."""

    def add(self, key: str, amount: int = 1, *, now: float, ttl: float) -> None:
        """``incr`` for a caller that does not need the new value. A store may send it without
        waiting for the answer (Redis: with the next command of the same thread), so a failure may
        only be logged: callers use it for marks whose absence refuses, never admits, a call (the
        records and runs prerequisites ask for), and never for a taint mark or a limit."""

    def tally(
        self, incrs: Sequence[tuple[str, float]], *, now: float, reads: Sequence[str] = ()
    ) -> list[int]:
        """Add 1 to each ``(key, ttl)`` of ``incrs``, then read each key of ``reads``, in one step
        (one round trip on Redis): the new values, then the values read, in that order."""

    def ceilings(self, ceilings: Sequence[Ceiling], *, now: float) -> list[int]:
        """Count or read each ceiling in order, in one step (one round trip on Redis), stopping
        after the first whose value is over its limit: that one's effect stands, the rest are not
        touched. The values of the ceilings reached, in order."""

    def ahead(self, keys: Sequence[str], *, now: float) -> dict[str, int]:
        """The values of ``keys`` (0 if absent or expired), for reads a call makes later. A store
        that batches fills the dict when its next command is answered (Redis: the read rides
        unawaited with it), so a key may be missing until then: read it from the store as usual
        (``guard.stages.base.counted`` does)."""

    def get(self, key: str, *, now: float) -> int:
        """The current value; 0 if absent or expired."""

    def reset(self, key: str) -> None:
        """Delete the counter."""

    def add_within(self, key: str, amount: int, limit: int, *, now: float, ttl: float) -> bool:
        """Atomically add ``amount`` only if the result stays ``<= limit``; True if added."""

    def purge(self, now: float) -> int:
        """Delete expired counters; returns how many."""


class _Counting(Protocol):
    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int: ...

    def get(self, key: str, *, now: float) -> int: ...


class OneStepCounters:
    """``add``, ``tally``, ``ceilings`` and ``ahead`` for a counter store whose every call is one
    local step (memory, a SQLite file): nothing to batch or leave unawaited, so they are its
    ``incr`` and ``get``."""

    batches = False

    def add(self: _Counting, key: str, amount: int = 1, *, now: float, ttl: float) -> None:
        self.incr(key, amount, now=now, ttl=ttl)

    def tally(
        self: _Counting,
        incrs: Sequence[tuple[str, float]],
        *,
        now: float,
        reads: Sequence[str] = (),
    ) -> list[int]:
        values = [self.incr(key, now=now, ttl=ttl) for key, ttl in incrs]
        return values + [self.get(key, now=now) for key in reads]

    def ceilings(self: _Counting, ceilings: Sequence[Ceiling], *, now: float) -> list[int]:
        values: list[int] = []
        for ceiling in ceilings:
            if ceiling.ttl is None:
                value = self.get(ceiling.key, now=now)
            else:
                value = self.incr(ceiling.key, now=now, ttl=ceiling.ttl)
            values.append(value)
            if value > ceiling.limit:
                break
        return values

    def ahead(self: _Counting, keys: Sequence[str], *, now: float) -> dict[str, int]:
        return {key: self.get(key, now=now) for key in keys}
