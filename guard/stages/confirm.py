"""Stage 7: risky writes wait for a human. Only the host decides; the model only learns it waits.

A pending action keeps the facts of the proposal (who, whether they were identified, the exact
arguments, the checks' warnings) and a seal: an HMAC-SHA256 of those facts under the deployment
key (``Guard(approval_key=...)``, else ``CALLGATE_MASKING_KEY``). The seal is checked before an
approved action runs, so editing the store (its arguments, principal, scopes) makes the action
refuse to run instead of running something nobody approved. The decision itself (state, by, at)
is outside the seal: approvers record it without the key.
"""

from __future__ import annotations

import hmac
import json
import logging
import operator
import os
import secrets
from dataclasses import dataclass
from typing import Any

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject
from guard.stages.idempotency import proposal_key
from guard.stores.base import PENDING_ACTION_FIELDS, ApprovalState, PendingAction

__all__ = ["ConfirmStage", "seal", "seal_key", "sealed"]

log = logging.getLogger("guard")

_UNSEALED = ("state", "decided_by", "decided_at", "seal")
"""The decision and the seal itself: everything else about a pending action is sealed."""

_SEALED = tuple(sorted(name for name in PENDING_ACTION_FIELDS if name not in _UNSEALED))
_facts = operator.attrgetter(*_SEALED)
_facts_of_fields = operator.itemgetter(*_SEALED)
# One encoder for every seal: ``json.dumps`` with these options builds a new one per call. The
# text must stay byte for byte what it was (sorted keys, no spaces, ASCII), or actions filed by
# an older process stop verifying.
_FACTS_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_PROCESS_KEY = secrets.token_bytes(32)
"""The seal key of a process that configured none."""


def seal_key(configured: bytes | str | None = None) -> bytes:
    """The key pending actions are sealed with: ``configured``, else ``$CALLGATE_MASKING_KEY``.

    Without either, a random key for this process: approvals still cannot be forged, but a
    restarted process (or another one) cannot run the actions this one filed. Deployments that
    approve across processes or restarts set the key."""
    key = configured if configured is not None else os.environ.get("CALLGATE_MASKING_KEY")
    if key is None or key == "":
        return _PROCESS_KEY  # one per process, not per guard: a host's guards share their stores
    raw = key.encode() if isinstance(key, str) else key
    return hmac.digest(raw, b"callgate pending action seal v1", "sha256")


def seal(action: PendingAction, key: bytes) -> str:
    """The HMAC of every fact of ``action`` but its decision, as hex."""
    return _sign(_facts(action), key)


def _sign(facts: tuple[object, ...], key: bytes) -> str:
    text = _FACTS_JSON.encode(dict(zip(_SEALED, facts, strict=True)))
    return hmac.digest(key, text.encode(), "sha256").hex()


_last_sealed: tuple[bytes, str, tuple[object, ...], list[type]] | None = None
"""The facts most recently sealed or verified, with their key, seal and the facts' types. An
approval reads its action three times (filed, decided, in this stage), each a new copy from the
store with the same facts: equal facts of the same types under the same seal verify without
encoding and signing them again. Types too, since ``1 == 1.0 == True`` encode differently."""


def sealed(action: PendingAction, key: bytes) -> bool:
    """``action``'s facts are those it was filed with, under ``key``."""
    last = _last_sealed  # one read: another thread may replace it meanwhile, never half of it
    facts = _facts(action)
    if (
        last is not None
        and last[1] == action.seal
        and last[0] == key
        and last[2] == facts
        and last[3] == list(map(type, facts))
    ):
        return True
    if not hmac.compare_digest(action.seal, _sign(facts, key)):
        return False
    _remember(key, action.seal, facts)
    return True


def _sealed_now(fields: dict[str, Any], key: bytes) -> PendingAction:
    """The pending action of ``fields`` (its facts), sealed and remembered as verified: the
    approval reads it next."""
    facts = _facts_of_fields(fields)
    action = PendingAction(**fields, seal=_sign(facts, key))
    _remember(key, action.seal, facts)
    return action


def _remember(key: bytes, seal: str, facts: tuple[object, ...]) -> None:
    global _last_sealed
    _last_sealed = (key, seal, facts, list(map(type, facts)))


_ASK = {
    Code.CONFIRMATION_REQUIRED: "This action needs a human's approval before it runs.",
    Code.TAINTED_CONTEXT: "Outside content was read in this conversation, so a human must approve "
    "any change before it runs.",
    Code.UNTRUSTED_VALUE: "A value in this call came from outside content, not from the user or "
    "their records, so a human must approve it before it runs.",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmStage:
    """Runs last before execute, so a human is only asked about calls that would succeed.

    The pending action holds the validated arguments the approver sees; on resumption the call runs
    exactly those (the fingerprint binds them), under a key derived from the approval.
    """

    env: Env
    name: str = "confirm"

    def __call__(self, call: Call) -> ToolResult | None:
        if (action := call.approval) is not None:
            return self._decided(call, action)
        spec = call.spec
        assert spec is not None and call.canonical is not None and call.fingerprint is not None
        reason = call.needs_human
        if reason is None:  # no check or policy asked: a write at or above confirm_at still waits
            risk = spec.risk if call.risk is None else call.risk
            if not spec.is_write or risk < self.env.policy.confirm_at:
                return None
            reason = Code.CONFIRMATION_REQUIRED
        ask = _ASK[reason] if call.human_message is None else call.human_message
        if call.shadowed:  # shadow mode asks nobody: the would-be decision is recorded, no approval
            return reject(call, reason, f"{ask} (shadow mode: not enforced)")
        now, approvals = call.now, self.env.approvals
        key = proposal_key(call.session_id, spec.name, call.canonical)
        new = self._action(call, key, reason, now)
        action = approvals.file(new, now=now)  # the pending one of this proposal, else ``new``
        # One that does not verify could never run (edited, or filed under another key): file anew.
        if action is not new and not sealed(action, self.env.seal_key):
            approvals.create(new)
            action = new
        return reject(
            call,
            reason,
            f"{ask} It is waiting as {action.id}. Tell the user it awaits approval; "
            "do not call the tool again for it.",
            data={"approval_id": action.id, "expires_at": action.expires_at},
            approval_id=action.id,
        )

    def _action(self, call: Call, key: str, reason: Code, now: float) -> PendingAction:
        """The pending action this call would file, sealed."""
        assert call.spec is not None and call.canonical is not None and call.fingerprint is not None
        warnings = call.warnings
        fields = dict(
            id="apr_" + secrets.token_hex(8),
            session_id=call.session_id,
            principal_id=call.principal.id,
            role=call.principal.role,
            scopes=tuple(sorted(call.principal.scopes)),
            tool=call.spec.name,
            arguments=call.canonical,
            fingerprint=call.fingerprint,
            proposal_key=key,
            call_id=call.call_id,
            reason=str(reason),
            created_at=now,
            expires_at=now + self.env.policy.confirmation_ttl,
            authenticated=call.principal.authenticated,
            warnings=json.dumps([w.to_dict() for w in warnings], separators=(",", ":"))
            if warnings
            else "[]",
            sensitive=tuple(sorted(call.spec.sensitive_fields)),
        )
        return _sealed_now(fields, self.env.seal_key)

    def _decided(self, call: Call, action: PendingAction) -> ToolResult | None:
        if action.state is ApprovalState.DENIED:
            return reject(
                call,
                Code.CONFIRMATION_DENIED,
                "A human declined this action. Do not retry it; tell the user it was not done.",
            )
        if action.state is not ApprovalState.APPROVED:
            return reject(
                call,
                Code.CONFIRMATION_EXPIRED,
                "The approval window closed before anyone decided. Nothing was done; ask the user "
                "whether to propose it again.",
            )
        if not sealed(action, self.env.seal_key):
            log.error(
                "pending action %s does not match its seal: not run (edited in the store, or "
                "filed by a process with another key: set CALLGATE_MASKING_KEY or approval_key)",
                action.id,
            )
            return reject(
                call,
                Code.CONFIRMATION_DENIED,
                "The approved action was changed after it was proposed, or this process cannot "
                "check it. Nothing was done; tell the user it was not done.",
            )
        if call.fingerprint != action.fingerprint:  # the approval covers exactly what was shown
            return reject(
                call,
                Code.CONFIRMATION_DENIED,
                "The approved action does not match this call. Nothing was done.",
            )
        call.confirmed = True
        return None
