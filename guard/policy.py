"""Limits enforced in code, never in the prompt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from guard.registry import Risk

__all__ = ["AmountLimit", "Policy", "RateLimit", "RolePolicy"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AmountLimit:
    """Caps an integer argument of one tool, per request and per principal per UTC day."""

    tool: str
    """The tool whose argument is capped."""
    field: str = "amount_cents"
    """The integer argument (in minor units)."""
    per_request: int | None = None
    """Largest value one call may carry."""
    per_day: int | None = None
    """Largest sum per principal per UTC day, counted when the call executes."""
    group_by: str | None = "currency"
    """Keep separate sums per value of this argument: cents of BRL and USD do not add up."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RolePolicy:
    """What one kind of principal may do."""

    tools: frozenset[str]
    """The allowlist: tool names this role may call."""
    limits: tuple[AmountLimit, ...] = ()
    """Per-request and daily caps for this role."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RateLimit:
    """At most ``calls`` per ``seconds`` per session (fixed window)."""

    calls: int
    seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """The deployment's rules for every session."""

    roles: Mapping[str, RolePolicy]
    """Per role: allowlist and limits. A role missing here may call nothing."""
    max_steps_per_session: int = 50
    """Hard ceiling on tool calls in one session, rejected ones included."""
    max_steps_per_turn: int = 12
    """Ceiling on tool calls between two user messages, once the host marks turns
    (``Session.next_turn``, or ``Guard.session(..., turn=n)``); unmarked sessions get only
    ``max_steps_per_session``."""
    rate_limit: RateLimit | None = field(default_factory=lambda: RateLimit(calls=20, seconds=1.0))
    """Per-session call rate; None for none."""
    max_invalid_in_a_row: int = 3
    """After this many consecutive invalid calls the model is told to hand over."""
    invalid_streak_ttl: float | None = None
    """Seconds an invalid streak is kept after its last invalid call; None: ``session_ttl``. A host
    without turns (an MCP server) sets a cool-down here, so an exhausted budget does not lock the
    session for good."""
    max_argument_bytes: int = 64 * 1024
    """Larger argument texts are refused unparsed (INVALID_JSON, naming the limit)."""
    max_identical_calls: int = 3
    """Identical calls (same tool and canonical arguments) allowed per session; more are loops."""
    confirm_at: Risk = Risk.HIGH
    """Writes at or above this risk wait for a human."""
    confirmation_ttl: float = 900.0
    """Seconds a pending approval stays open."""
    idempotency_ttl: float = 86_400.0
    """Seconds a completed write is remembered for replay."""
    claim_lease: float = 60.0
    """Seconds after which an in-flight claim left by a crashed process may be taken over."""
    session_ttl: float = 86_400.0
    """Seconds session counters (steps, loops, taint) are kept after their last use."""
    taint_requires_confirmation: bool = True
    """After an untrusted result, writes need a human (capability separation)."""

    def role(self, name: str) -> RolePolicy | None:
        return self.roles.get(name)
