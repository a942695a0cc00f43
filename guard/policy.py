"""Limits enforced in code, never in the prompt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from guard.registry import Risk

__all__ = ["AmountLimit", "Policy", "RateLimit", "RolePolicy", "TaintMode"]


class TaintMode(StrEnum):
    """What untrusted output in a session makes a write (or an egress read) wait for a human."""

    SESSION = "session"
    """Every write and egress read after it (``TAINTED_CONTEXT``): capability separation."""
    VOUCHED = "vouched"
    """The default. A call whose sink argument carries a value no trusted source vouches for (the
    user's values the host declared, trusted tool results): ``UNTRUSTED_VALUE``. Tools that
    declare no sinks are gated as in ``SESSION``, so a deployment that declares none sees no
    difference."""
    UNTRUSTED = "untrusted"
    """Only a call whose sink argument carries a value seen in untrusted output, in any
    re-encoding, and in no trusted source (``UNTRUSTED_VALUE``). Weaker: a value the model
    assembled from pieces is not seen anywhere and passes. Measured in ``bench/injection.py``."""


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
    confirm_above: int | None = None
    """A call carrying more than this waits for a human (``CONFIRMATION_REQUIRED``): risk by
    arguments, for a read as for a write."""


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
    """After an untrusted result, writes need a human (capability separation); ``taint_mode``
    says which ones."""
    taint_mode: TaintMode = TaintMode.VOUCHED
    """Argument-level (a sink argument whose value no trusted source vouches for waits; tools
    without declared sinks are gated session-wide) or session-wide (every write after untrusted
    output). See docs/security.md, "Value provenance", for the measurements behind the default."""
    record_provenance: bool = False
    """Keep every session's value provenance (``CheckContext.provenance``) whatever the tools
    declare; without it, provenance is kept when an argument-level mode has a tool with sinks."""
    provenance_limit: int = 4_096
    """Values kept per session. Past it nothing is forgotten: new values go unrecorded and every
    value no trusted source vouches for counts as untrusted."""

    def role(self, name: str) -> RolePolicy | None:
        return self.roles.get(name)
