"""The guard policy of one principal, from the config's deployment-wide ``policy`` section.

MCP has no turns: the per-turn ceiling is the session's, and an exhausted validation budget cools
down (``validation_cooldown``) instead of lasting as long as the session.
"""

from __future__ import annotations

from callgate.gateway.config import PolicyConfig
from guard import AmountLimit, Policy, RateLimit, RolePolicy, ToolSpec

__all__ = ["principal_policy"]


def principal_policy(
    policy: PolicyConfig,
    role: str,
    tools: frozenset[str],
    specs: list[ToolSpec],
    limits: list[AmountLimit],
) -> Policy:
    """A policy whose only role is ``role`` with exactly ``tools``: one principal's own allowlist."""
    worst = max(
        (
            (s.timeout or 0) * s.retry.attempts + s.retry.max_delay * (s.retry.attempts - 1)
            for s in specs
            if s.is_write
        ),
        default=0.0,
    )
    rate = policy.rate_limit
    return Policy(
        roles={
            role: RolePolicy(
                tools=tools, limits=tuple(limit for limit in limits if limit.tool in tools)
            )
        },
        max_steps_per_session=policy.max_steps_per_session,
        max_steps_per_turn=policy.max_steps_per_session,
        rate_limit=RateLimit(calls=rate.calls, seconds=rate.seconds) if rate is not None else None,
        max_invalid_in_a_row=policy.max_invalid_in_a_row,
        invalid_streak_ttl=policy.validation_cooldown,
        max_argument_bytes=policy.max_argument_bytes,
        max_identical_calls=policy.max_identical_calls,
        confirm_at=policy.confirm_at,
        confirmation_ttl=policy.confirmation_ttl,
        claim_lease=max(60.0, worst + 10.0),  # a write's claim outlives its worst case
        taint_requires_confirmation=policy.taint_requires_confirmation,
    )
