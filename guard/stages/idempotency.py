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

__all__ = ["IdempotencyStage", "actor", "approval_key", "proposal_key"]

log = logging.getLogger("guard")


def actor(principal: Principal, session_id: str) -> str:
    """Whose write it is, for its key: the authenticated principal, else the session.

    Not the session alone: session ids are per process or connection (a stdio gateway draws one
    at start), so a host restarted after a crash would propose the same write under a new key and
    run it a second time. The principal is what the host authenticates and outlives a restart;
    with the tool and the canonical arguments it names one logical action, from whichever
    process or conversation it comes. Anonymous principals share an id, so their writes stay
    keyed by session: one stranger's write must never replay into another's conversation."""
    if principal.authenticated:
        return "principal:" + principal.id
    return "session:" + session_id


def proposal_key(actor: str, tool: str, canonical: str) -> str:
    """The key of a proposed write: its ``actor``, tool and canonical validated arguments."""
    return "k_" + digest(actor, tool, canonical)


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
        if call.approval is not None:
            call.idempotency_key = approval_key(call.approval.id)
        elif spec.idempotency_field is not None:
            assert call.arguments is not None
            request_id = str(getattr(call.arguments, spec.idempotency_field))
            call.idempotency_key = proposal_key(
                actor(call.principal, call.session_id), spec.name, "id:" + request_id
            )
        else:
            call.idempotency_key = proposal_key(
                actor(call.principal, call.session_id), spec.name, call.canonical
            )
        claim = env.idempotency.claim(
            call.idempotency_key,
            call.fingerprint,
            now=now,
            lease=env.policy.claim_lease,
            take_stale=spec.idempotent_backend,
        )
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
            return self._abandoned(call)
        return reject(
            call,
            Code.IDEMPOTENCY_CONFLICT,
            "This action was already recorded with different arguments. Do not retry it.",
        )

    def _abandoned(self, call: Call) -> ToolResult:
        """An earlier attempt claimed the key and died without a result, perhaps mid-write, and
        the backend cannot deduplicate: running again could apply it twice. The outcome is unknown;
        it is recorded as the key's result, so every repeat replays it until a human or a status
        check decides, and no purge of the stale claim can let a blind second run through."""
        assert call.idempotency_key is not None and call.fingerprint is not None
        result = reject(
            call,
            Code.TIMEOUT,
            f"An earlier attempt of this call stopped before answering: the action may or may not "
            f"have happened (key {call.idempotency_key}). Do not retry it; check its status first.",
            outcome=Outcome.UNKNOWN,
        )
        try:
            self.env.idempotency.complete(
                call.idempotency_key,
                call.fingerprint,
                stored(result),
                now=call.now,
                ttl=self.env.policy.idempotency_ttl,
            )
        except Exception:  # the stale claim stays: the next repeat is told the same
            log.exception("recording the unknown outcome of %s failed", call.idempotency_key)
        return result


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
