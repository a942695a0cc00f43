"""Stage 6: limits in code, and capability separation after untrusted content."""

from __future__ import annotations

from dataclasses import dataclass

from guard.call import Call, Reservation
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["PolicyStage", "day_key", "taint_key"]

DAY = 86_400.0


def taint_key(session_id: str) -> str:
    """Set once a tool with untrusted output has run in the session."""
    return f"taint:{session_id}"


def day_key(principal_id: str, tool: str, field: str, group: object, day: int) -> str:
    """The running daily sum of ``field`` for one principal, tool and group (currency)."""
    return f"day:{principal_id}:{tool}:{field}:{group}:{day}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyStage:
    """Per-request caps refuse at once; daily caps are checked here and reserved atomically at execute."""

    env: Env
    name: str = "policy"

    def __call__(self, call: Call) -> ToolResult | None:
        spec, arguments, env = call.spec, call.arguments, self.env
        assert spec is not None and arguments is not None  # schema ran
        role = env.policy.role(call.principal.role)
        now = call.now
        for limit in role.limits if role else ():
            if limit.tool != spec.name:
                continue
            value = int(getattr(arguments, limit.field))
            if limit.per_request is not None and value > limit.per_request:
                return reject(
                    call,
                    Code.POLICY_LIMIT,
                    f"{limit.field} may be at most {limit.per_request} per request here. Do not "
                    "split it into smaller calls; offer the user a human agent.",
                )
            if limit.per_day is not None:
                group = getattr(arguments, limit.group_by) if limit.group_by else "-"
                key = day_key(call.principal.id, spec.name, limit.field, group, int(now // DAY))
                if env.counters.get(key, now=now) + value > limit.per_day:
                    return reject(
                        call,
                        Code.POLICY_LIMIT,
                        f"The daily limit for {spec.name} would be exceeded. Do not retry today; "
                        "offer the user a human agent.",
                    )
                call.reservations += (Reservation(key=key, amount=value, limit=limit.per_day),)
        if (
            spec.is_write
            and call.approval is None
            and env.policy.taint_requires_confirmation
            and env.counters.get(taint_key(call.session_id), now=now) > 0
        ):
            call.needs_human = Code.TAINTED_CONTEXT
        return None
