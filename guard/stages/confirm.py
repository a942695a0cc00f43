"""Stage 7: risky writes wait for a human. Only the host decides; the model only learns it waits."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject
from guard.stages.idempotency import proposal_key
from guard.stores.base import ApprovalState, PendingAction

__all__ = ["ConfirmStage"]

_ASK = {
    Code.CONFIRMATION_REQUIRED: "This action needs a human's approval before it runs.",
    Code.TAINTED_CONTEXT: "Outside content was read in this conversation, so a human must approve "
    "any change before it runs.",
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
        if reason is None and spec.is_write and spec.risk >= self.env.policy.confirm_at:
            reason = Code.CONFIRMATION_REQUIRED
        if reason is None:
            return None
        if call.shadowed:  # shadow mode asks nobody: the would-be decision is recorded, no approval
            return reject(call, reason, f"{_ASK[reason]} (shadow mode: not enforced)")
        now, approvals = call.now, self.env.approvals
        key = proposal_key(call.session_id, spec.name, call.canonical)
        action = approvals.find_pending(key, now=now) or self._create(call, key, reason, now)
        return reject(
            call,
            reason,
            f"{_ASK[reason]} It is waiting as {action.id}. Tell the user it awaits approval; "
            "do not call the tool again for it.",
            data={"approval_id": action.id, "expires_at": action.expires_at},
            approval_id=action.id,
        )

    def _create(self, call: Call, key: str, reason: Code, now: float) -> PendingAction:
        assert call.spec is not None and call.canonical is not None and call.fingerprint is not None
        action = PendingAction(
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
        )
        self.env.approvals.create(action)
        return action

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
        if call.fingerprint != action.fingerprint:  # the approval covers exactly what was shown
            return reject(
                call,
                Code.CONFIRMATION_DENIED,
                "The approved action does not match this call. Nothing was done.",
            )
        call.confirmed = True
        return None
