"""The state of one call as it moves through the stages, and the record observers read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from guard.codes import Code
from guard.result import Problem, ToolResult
from guard.session import Principal

if TYPE_CHECKING:
    from guard.registry import ToolSpec
    from guard.stores.base import PendingAction

__all__ = ["Call", "Reservation", "RetryRecord", "StageRecord"]


@dataclass(slots=True, kw_only=True)
class StageRecord:
    """One stage that ran: when, and how it ended."""

    name: str
    start_ns: int
    end_ns: int
    outcome: str
    """``pass`` (on to the next stage), ``reject`` (the call ends unsuccessfully) or ``final``
    (the call ends successfully here: executed, or replayed)."""
    code: Code | None = None


@dataclass(slots=True, kw_only=True)
class RetryRecord:
    """A failed attempt that will be retried."""

    attempt: int
    """The attempt that failed (1 for the first)."""
    error: str
    """The exception type's name (never its message, which may carry data)."""
    delay: float
    """Seconds of backoff before the next attempt."""
    at_ns: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Reservation:
    """A share of a daily limit the call will take when it executes."""

    key: str
    amount: int
    limit: int


@dataclass(slots=True, kw_only=True)
class Call:
    """Everything known about one call. Stages fill it in; observers read it and must not change it."""

    tool: str
    """The tool name as the model sent it (may be unknown)."""
    raw_arguments: str | None
    """The arguments as the model sent them (JSON text), before any parsing."""
    call_id: str | None
    session_id: str
    principal: Principal
    turn: int
    start_ns: int
    step: int = 0
    """The call's number in its session, from 1; 0 if the budget stage did not run."""
    spec: ToolSpec | None = None
    parsed: Any = None
    """The decoded JSON (any JSON value until the parse stage checks it is an object)."""
    arguments: BaseModel | None = None
    """Validated arguments."""
    canonical: str | None = None
    """Canonical JSON of the validated arguments: what keys, loops and approvals are computed from."""
    fingerprint: str | None = None
    """Hash of tool and canonical arguments."""
    idempotency_key: str | None = None
    claimed: bool = False
    """This call holds the idempotency claim and must complete or release it."""
    approval: PendingAction | None = None
    """Set when the call resumes a human decision."""
    decision: str | None = None
    """For resumed calls: approved, denied or expired."""
    needs_human: Code | None = None
    """Set by the policy stage when a human must confirm (TAINTED_CONTEXT)."""
    confirmed: bool = False
    """The call runs under a human approval."""
    invalid_streak: int = 0
    """Invalid calls in a row before this one, as the budget stage read it."""
    reservations: list[Reservation] = field(default_factory=list)
    """Daily-limit shares to take at execute, and give back if nothing happened."""
    maybe_applied: bool = False
    """An attempt timed out after the request was sent: a write may have taken effect."""
    problems: list[Problem] = field(default_factory=list)
    attempts: int = 0
    retries: list[RetryRecord] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    end_ns: int = 0
    result: ToolResult | None = None
    untrusted_text: list[str] = field(default_factory=list)
    """Text of an untrusted result, for telemetry to scan for injected instructions."""
    result_data: dict[str, Any] | None = None
    """The filtered result the model received."""

    @property
    def rejected_stage(self) -> str | None:
        """The stage that ended the call unsuccessfully, if any."""
        for stage in reversed(self.stages):
            if stage.outcome == "reject":
                return stage.name
        return None
