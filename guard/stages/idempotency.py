"""Stage 4: one logical call runs once. Repeats are replayed, loops stopped, concurrent twins held off."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from guard.call import Call
from guard.codes import Code
from guard.result import Outcome, ToolResult
from guard.session import Principal
from guard.stages.base import Env, digest, reject
from guard.stores.base import ClaimState

__all__ = ["IdempotencyStage", "actor", "approval_key", "lock_key", "lock_of", "proposal_key"]

log = logging.getLogger("guard")


def actor(principal: Principal, session_id: str) -> str:
    """Whose write it is, for its in-flight lock: the authenticated principal, else the session.

    Session ids are per process or connection (a stdio gateway draws one at start), so a host
    restarted after a crash proposes the same write under a new session and a new key: only a
    lock wider than the session can tell it that the killed attempt may have run. The principal
    is what the host authenticates and outlives a restart. Anonymous principals share an id, so
    their locks stay the session's: one stranger's write must never hold up another's."""
    if principal.authenticated:
        return "principal:" + principal.id
    return "session:" + session_id


def proposal_key(session_id: str, tool: str, canonical: str) -> str:
    """The key of a proposed write: session, tool and canonical validated arguments.

    Replays, conflicts and pending approvals are the conversation's: another conversation of the
    same user proposing the same write runs it (under its own rules and confirmation)."""
    return "k_" + digest(session_id, tool, canonical)


def lock_key(actor: str, tool: str, canonical: str) -> str:
    """The in-flight lock of a write: its ``actor``, tool and canonical validated arguments.

    Held while the write runs, from every session and process of the actor; released once its
    outcome is known, kept with the outcome while that is unknown (``IdempotencyStore.claim``)."""
    return "l_" + digest(actor, tool, canonical)


def approval_key(approval_id: str) -> str:
    """The key of an approved action: the human approved one logical action, whatever the session does."""
    return "a_" + digest(approval_id)


@dataclass(frozen=True, kw_only=True, slots=True)
class IdempotencyStage:
    """Counts identical calls for every tool; for writes, claims the key atomically before anything runs."""

    env: Env
    name: str = "idempotency"

    def __call__(self, call: Call) -> ToolResult | None:
        assert call.spec is not None and call.canonical is not None  # schema ran
        spec, env, now = call.spec, self.env, call.now
        call.fingerprint = digest(spec.name, call.canonical)
        if call.approval is None:
            seen = env.counters.incr(
                f"loop:{call.session_id}:{call.fingerprint}", now=now, ttl=env.policy.session_ttl
            )
            if seen > env.policy.max_identical_calls:
                return reject(
                    call,
                    Code.LOOP_DETECTED,
                    f"You already made this exact call {seen - 1} times in this conversation. "
                    "Use the previous result instead of calling again.",
                )
        if not spec.is_write:
            return None
        subject = _subject(call)
        if call.approval is not None:
            call.idempotency_key = approval_key(call.approval.id)
        else:
            call.idempotency_key = proposal_key(call.session_id, spec.name, subject)
        lock = lock_key(actor(call.principal, call.session_id), spec.name, subject)
        claim = env.idempotency.claim(
            call.idempotency_key,
            call.fingerprint,
            now=now,
            lease=env.policy.claim_lease,
            take_stale=spec.idempotent_backend,
            lock=lock,
        )
        if claim.holder is not None:  # the answer is about the attempt holding the actor's lock
            if claim.state is ClaimState.STALE and spec.idempotent_backend:
                # Its backend deduplicates by that attempt's key: retry under it, not under ours.
                call.idempotency_key = claim.holder
                claim = env.idempotency.claim(
                    claim.holder,
                    call.fingerprint,
                    now=now,
                    lease=env.policy.claim_lease,
                    take_stale=True,
                    lock=lock,
                )
            call.idempotency_key = claim.holder or call.idempotency_key
        if claim.state is ClaimState.CLAIMED:
            call.claimed = True
            return None
        if claim.state is ClaimState.COMPLETED:
            return replayed(call, claim.result or "{}")
        if claim.state is ClaimState.IN_FLIGHT:
            return reject(
                call,
                Code.IN_PROGRESS,
                "An identical call is still running. Do not send it again; wait for its result.",
            )
        if claim.state is ClaimState.STALE:
            return self._abandoned(call, lock if claim.holder is not None else None)
        return reject(
            call,
            Code.IDEMPOTENCY_CONFLICT,
            "This action was already recorded with different arguments. Do not retry it.",
        )

    def _abandoned(self, call: Call, lock: str | None) -> ToolResult:
        """An earlier attempt claimed the key and died without a result, perhaps mid-write, and
        the backend cannot deduplicate: running again could apply it twice. The outcome is unknown;
        it is recorded as the key's result, so every repeat replays it until a human or a status
        check decides, and no purge of the stale claim can let a blind second run through. Recorded
        under the key, which settles the actor's ``lock`` it holds; under a ``lock`` held by
        another session's dead attempt too, in case that attempt's record is gone."""
        assert call.idempotency_key is not None and call.fingerprint is not None
        result = reject(
            call,
            Code.TIMEOUT,
            f"An earlier attempt of this call stopped before answering: the action may or may not "
            f"have happened (key {call.idempotency_key}). Do not retry it; check its status first.",
            outcome=Outcome.UNKNOWN,
        )
        try:
            for key in (call.idempotency_key, lock) if lock else (call.idempotency_key,):
                self.env.idempotency.complete(
                    key,
                    call.fingerprint,
                    stored(result),
                    now=call.now,
                    ttl=self.env.policy.idempotency_ttl,
                )
        except Exception:  # the stale claim stays: the next repeat is told the same
            log.exception("recording the unknown outcome of %s failed", call.idempotency_key)
        return result


def lock_of(call: Call) -> str:
    """The actor's in-flight lock of a write ``call`` whose schema ran."""
    assert call.spec is not None
    return lock_key(actor(call.principal, call.session_id), call.spec.name, _subject(call))


def _subject(call: Call) -> str:
    """What names the action besides actor and tool: the request id the tool declares for
    deduplication, else the canonical validated arguments."""
    assert call.spec is not None and call.canonical is not None
    field = call.spec.idempotency_field
    if field is None:
        return call.canonical
    assert call.arguments is not None
    return "id:" + str(getattr(call.arguments, field))


def stored(result: ToolResult) -> str:
    """The JSON kept for replay: what the model saw, and what happened."""
    return json.dumps(
        {
            "ok": result.ok,
            "code": str(result.code),
            "message": result.message,
            "data": result.data,
            "outcome": str(result.outcome),
            "approval_id": result.approval_id,
        },
        separators=(",", ":"),
    )


def replayed(call: Call, text: str) -> ToolResult:
    """The stored result of a completed write, marked as a replay."""
    saved = json.loads(text)
    return ToolResult(
        ok=bool(saved.get("ok")),
        code=Code[saved.get("code", "OK")],  # names equal values (a test keeps it so)
        message="This call already ran; here is its original result. Nothing was done again. "
        + saved.get("message", ""),
        data=saved.get("data"),
        replayed=True,
        outcome=Outcome(saved.get("outcome", "applied")),
        call_id=call.call_id,
        tool=call.tool,
        idempotency_key=call.idempotency_key,
        approval_id=saved.get("approval_id"),
    )
