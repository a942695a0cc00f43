"""Stage 4: one logical call runs once. Repeats are replayed, loops stopped, concurrent twins held off."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from guard.call import Call
from guard.codes import Code, ReasonCode
from guard.registry import ToolContext
from guard.result import Advisory, Outcome, ToolResult
from guard.session import Principal
from guard.stages.base import Env, digest, reject
from guard.stores.base import Ceiling, ClaimAsk, ClaimState

__all__ = [
    "IdempotencyStage",
    "actor",
    "approval_key",
    "lock_key",
    "lock_of",
    "proposal_key",
    "settled_by",
]

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


log = logging.getLogger(__name__)


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
        loop, fingerprint = self.loop(call), call.fingerprint
        assert fingerprint is not None  # set by loop
        if loop is not None:
            # Counted already when the pipeline batched it with the budget's ceilings (Redis).
            seen = call.loop_count or env.counters.incr(
                loop.key, now=now, ttl=env.policy.session_ttl
            )
            if seen > loop.limit:
                return reject(
                    call,
                    Code.LOOP_DETECTED,
                    f"You already made this exact call {seen - 1} times in this conversation. "
                    "Use the previous result instead of calling again.",
                )
        if not spec.is_write:  # a read claims nothing (``ask`` would say None)
            return None
        ask = self.ask(call)
        assert ask is not None
        lock = ask.lock
        claim = call.claim_ahead or ask.claim_on(env.idempotency, now=now)
        if claim.holder is not None:  # the answer is about the attempt holding the actor's lock
            if claim.state is ClaimState.STALE and spec.idempotent_backend:
                # Its backend deduplicates by that attempt's key: retry under it, not under ours.
                call.idempotency_key = claim.holder
                claim = env.idempotency.claim(
                    claim.holder,
                    fingerprint,
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
            if spec.reconcile is not None and _unknown(claim.result):
                return self._settle(call, claim.result) or replayed(
                    call, claim.result or "{}", codes=env.registry.codes
                )
            return replayed(call, claim.result or "{}", codes=env.registry.codes)
        if claim.state is ClaimState.IN_FLIGHT:
            return _in_progress(call)
        if claim.state is ClaimState.STALE:
            held = lock if claim.holder is not None else None
            if spec.reconcile is not None:
                return self._settle_stale(call, held)
            return self._abandoned(call, held)
        return reject(
            call,
            Code.IDEMPOTENCY_CONFLICT,
            "This action was already recorded with different arguments. Do not retry it.",
        )

    def ask(self, call: Call) -> ClaimAsk | None:
        """The claim a write makes, its key set on the call; None for a read. The loop counter
        (``loop``) has set the fingerprint."""
        assert call.spec is not None and call.fingerprint is not None
        spec = call.spec
        if not spec.is_write:
            return None
        subject = _subject(call)
        if call.approval is not None:
            call.idempotency_key = approval_key(call.approval.id)
        else:
            call.idempotency_key = proposal_key(call.session_id, spec.name, subject)
        return ClaimAsk(
            key=call.idempotency_key,
            fingerprint=call.fingerprint,
            lease=self.env.policy.claim_lease,
            take_stale=spec.idempotent_backend,
            lock=lock_key(actor(call.principal, call.session_id), spec.name, subject),
        )

    def loop(self, call: Call) -> Ceiling | None:
        """The call's fingerprint, set on it, and the loop counter it counts itself on; None for
        an approved action (the human approved this one run, however often it was proposed)."""
        assert call.spec is not None and call.canonical is not None  # schema ran
        call.fingerprint = digest(call.spec.name, call.canonical)
        if call.approval is not None:
            return None
        policy = self.env.policy
        key = f"loop:{call.session_id}:{call.fingerprint}"
        return Ceiling(key, policy.max_identical_calls, policy.session_ttl)

    def _settle(self, call: Call, saved: str | None = None) -> ToolResult | None:
        """The earlier outcome was unknown: ask the tool's status check, and record what it says
        as the key's result. Settled not applied, the call is not run again here: another repeat
        may be settling it at the same moment, and only a claim may run a write. An approved
        action's unknown (``saved`` names its approval) is asked, answered and recorded as the
        approval's: the key the backend was sent, so a later replay names that key too."""
        sent_under = _sent_under(call, saved)
        outcome = self._status(call, sent_under)
        if outcome is Outcome.UNKNOWN:
            return None
        call.settled = outcome
        result = settled(call, outcome)
        if sent_under is not None:
            approval_id = json.loads(saved or "{}").get("approval_id")
            result = replace(result, idempotency_key=sent_under, approval_id=approval_id)
        return self._record(call, result)

    def _settle_stale(self, call: Call, lock: str | None) -> ToolResult | None:
        """An earlier attempt claimed the key and died. If the status check says it took effect,
        that is the result; if it says it did not, the stale claim is taken (atomically: one
        repeat wins) and the call runs; if it cannot tell, the outcome stays unknown."""
        assert call.idempotency_key is not None and call.fingerprint is not None
        outcome = self._status(call)
        if outcome is Outcome.UNKNOWN:
            return self._abandoned(call, lock)
        call.settled = outcome
        if outcome is Outcome.APPLIED:
            return self._record(call, settled(call, outcome))
        claim = self.env.idempotency.claim(
            call.idempotency_key,
            call.fingerprint,
            now=call.now,
            lease=self.env.policy.claim_lease,
            take_stale=True,
            lock=lock_of(call),
        )
        if claim.state is ClaimState.CLAIMED:
            call.claimed = True
            return None
        if claim.state is ClaimState.COMPLETED:
            return replayed(call, claim.result or "{}", codes=self.env.registry.codes)
        return _in_progress(call)

    def _status(self, call: Call, sent_under: str | None = None) -> Outcome:
        """The tool's status check; a check that fails leaves the outcome unknown (logged)."""
        assert call.spec is not None and call.spec.reconcile is not None
        context = ToolContext(
            principal=call.principal,
            session_id=call.session_id,
            call_id=call.call_id,
            idempotency_key=sent_under or call.idempotency_key,
            attempt=0,
            timeout=call.spec.timeout,
            approval_id=call.approval.id if call.approval else None,
            deps=self.env.deps,
        )
        try:
            return Outcome(call.spec.reconcile(call.arguments, context))
        except Exception:
            log.exception("status check of %s failed", call.spec.name)
            return Outcome.UNKNOWN

    def _record(self, call: Call, result: ToolResult) -> ToolResult:
        assert call.idempotency_key is not None and call.fingerprint is not None
        self.env.idempotency.complete(
            call.idempotency_key,
            call.fingerprint,
            stored(result),
            now=call.now,
            ttl=self.env.policy.idempotency_ttl,
        )
        return result

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


def _in_progress(call: Call) -> ToolResult:
    """The answer while another attempt holds the key: that attempt may still apply the write,
    so nothing about it is settled yet and the outcome is unknown, never not applied."""
    return reject(
        call,
        Code.IN_PROGRESS,
        "An identical call is still running. Do not send it again; wait for its result.",
        outcome=Outcome.UNKNOWN,
    )


def _unknown(text: str | None) -> bool:
    return bool(text) and json.loads(text or "{}").get("outcome") == Outcome.UNKNOWN


def settled(call: Call, outcome: Outcome) -> ToolResult:
    """The answer once a status check has settled an unknown outcome: a replay, nothing run."""
    if outcome is Outcome.APPLIED:
        return ToolResult(
            ok=True,
            code=Code.OK,
            message="An earlier attempt of this call took effect (its status check says so). "
            "Nothing was done again.",
            replayed=True,
            outcome=Outcome.APPLIED,
            call_id=call.call_id,
            tool=call.tool,
            idempotency_key=call.idempotency_key,
        )
    result = reject(
        call,
        Code.UPSTREAM_UNAVAILABLE,
        "An earlier attempt of this call did not take effect (its status check says so). "
        "Nothing was done; tell the user, and send it again only with a new request id.",
    )
    return replace(result, replayed=True)


def settled_by(
    outcome: Outcome, *, by: str, tool: str | None, key: str, approval_id: str | None
) -> ToolResult:
    """What a human's settlement (``callgate outcomes settle``) records for ``key``: the answer
    ``settled`` gives, naming who settled it instead of a status check."""
    if outcome is Outcome.APPLIED:
        return ToolResult(
            ok=True,
            code=Code.OK,
            message=f"An earlier attempt of this call took effect ({by} checked and settled it). "
            "Nothing was done again.",
            replayed=True,
            outcome=Outcome.APPLIED,
            tool=tool,
            idempotency_key=key,
            approval_id=approval_id,
        )
    return ToolResult(
        ok=False,
        code=Code.UPSTREAM_UNAVAILABLE,
        message=f"An earlier attempt of this call did not take effect ({by} checked and settled "
        "it). Nothing was done; tell the user, and send it again only with a new request id.",
        replayed=True,
        outcome=Outcome.NOT_APPLIED,
        tool=tool,
        idempotency_key=key,
        approval_id=approval_id,
        fixable=Code.UPSTREAM_UNAVAILABLE.fixable,
    )


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
            "tool": result.tool,
            "code": str(result.code),
            "message": result.message,
            "data": result.data,
            "outcome": str(result.outcome),
            "approval_id": result.approval_id,
            "warnings": [warning.to_dict() for warning in result.warnings],
        },
        separators=(",", ":"),
    )


def replayed(call: Call, text: str, *, codes: Mapping[str, ReasonCode]) -> ToolResult:
    """The stored result of a completed write, marked as a replay, with the warnings it carried.

    ``codes`` spells every code the registry knows; a warning under a code it no longer knows
    is dropped (there is no code to give it). A proposal a human approved ran under its
    approval's key: a repeat of the proposal names that key, the one the backend was sent, so
    its status can be looked up by it."""
    saved = json.loads(text)
    warnings = tuple(
        Advisory(code=codes[item["code"]], message=item["message"])
        for item in saved.get("warnings", ())
        if item.get("code") in codes
    )
    outcome = Outcome(saved.get("outcome", "applied"))
    key = call.idempotency_key
    if saved.get("approval_id") and outcome is not Outcome.NOT_APPLIED:
        key = approval_key(saved["approval_id"])
    return ToolResult(
        ok=bool(saved.get("ok")),
        code=Code[saved.get("code", "OK")],  # names equal values (a test keeps it so)
        message="This call already ran; here is its original result. Nothing was done again. "
        + saved.get("message", ""),
        data=saved.get("data"),
        replayed=True,
        outcome=outcome,
        call_id=call.call_id,
        tool=call.tool,
        idempotency_key=key,
        approval_id=saved.get("approval_id"),
        warnings=warnings,
    )


def _sent_under(call: Call, text: str | None) -> str | None:
    """The key the backend was sent for a stored result: an approved action runs under its
    approval's key, and a repeat of its proposal must ask the status check about that one."""
    if not text or '"approval_id":' not in text:
        return None
    approval_id = json.loads(text).get("approval_id")
    return approval_key(approval_id) if approval_id else None
