"""The state of one call as it moves through the stages, and the record observers read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from guard.codes import Code, ReasonCode
from guard.result import Advisory, Outcome, Problem, ToolResult
from guard.session import Principal
from guard.waiting import BLOCKING, Waiter

if TYPE_CHECKING:
    from guard.provenance import ProvenanceHit
    from guard.registry import Risk, ToolSpec
    from guard.stores.base import Claim, PendingAction

__all__ = ["Call", "Reservation", "RetryRecord", "StageRecord", "stage_outcome"]


@dataclass(slots=True, kw_only=True)
class StageRecord:
    """One stage that ran: when, and how it ended."""

    name: str
    start_ns: int
    end_ns: int
    outcome: str
    """``pass`` (on to the next stage), ``reject`` (the call ends unsuccessfully) or ``final``
    (the call ends successfully here: executed, or replayed)."""
    code: ReasonCode | None = None


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
    """Everything known about one call. Stages fill it in; observers read it and must not change it.

    Built from the proposal and where it stands (who, which session, when, which stages); every
    field a stage fills in starts at its default and is not a constructor argument: the guard
    builds a call per proposal, and fifty keyword defaults cost more to bind than to assign."""

    tool: str
    """The tool name as the model sent it (may be unknown)."""
    raw_arguments: str | None
    """The arguments as the model sent them (JSON text), before any parsing."""
    call_id: str | None
    session_id: str
    principal: Principal
    turn: int
    start_ns: int
    step: int = field(init=False, default=0)
    """The call's number in its session, from 1; 0 if the budget stage did not run."""
    spec: ToolSpec | None = field(init=False, default=None)
    parsed: Any = field(init=False, default=None)
    """The decoded JSON (any JSON value until the parse stage checks it is an object)."""
    arguments: BaseModel | None = field(init=False, default=None)
    """Validated arguments."""
    canonical: str | None = field(init=False, default=None)
    """Canonical JSON of the validated arguments: what keys, loops and approvals are computed from."""
    fingerprint: str | None = field(init=False, default=None)
    """Hash of tool and canonical arguments."""
    loop_count: int = field(init=False, default=0)
    """The loop counter's value, when the pipeline counted it with the budget's ceilings (a store
    that batches); 0: the idempotency stage counts it itself."""
    counts: dict[str, int] | None = field(init=False, default=None)
    """Counter values read ahead with the loop counter (``guard.batching``): the marks the rules
    and the policy stage will read, so they cost no round trip of their own."""
    idempotency_key: str | None = field(init=False, default=None)
    claim_ahead: Claim | None = field(init=False, default=None)
    """The store's answer to this write's claim, when the pipeline made it with the budget's
    ceilings (``ClaimsAfterCounting``); None: the idempotency stage claims itself."""
    claimed: bool = field(init=False, default=False)
    """This call holds the idempotency claim and must complete or release it."""
    approval: PendingAction | None = field(init=False, default=None)
    """Set when the call resumes a human decision."""
    decision: str | None = field(init=False, default=None)
    """For resumed calls: approved, denied or expired."""
    needs_human: Code | None = field(init=False, default=None)
    """Set when a human must confirm: by a check (``ask_human``), or by the policy stage
    (TAINTED_CONTEXT, UNTRUSTED_VALUE, an amount above ``confirm_above``)."""
    human_message: str | None = field(init=False, default=None)
    """What a check that asked for a human told the model why."""
    provenance: ProvenanceHit | None = field(init=False, default=None)
    """The sink argument whose value made the call wait (UNTRUSTED_VALUE): for spans."""
    risk: Risk | None = field(init=False, default=None)
    """The call's risk from its arguments (``ToolSpec.risk_by``); None: the tool's ``risk``."""
    confirmed: bool = field(init=False, default=False)
    """The call runs under a human approval."""
    invalid_streak: int = field(init=False, default=0)
    """Invalid calls in a row before this one, as the budget stage read it."""
    reservations: tuple[Reservation, ...] = field(init=False, default=())
    """Daily-limit shares to take at execute, and give back if nothing happened."""
    maybe_applied: bool = field(init=False, default=False)
    """An attempt timed out after the request was sent: a write may have taken effect."""
    returned: bool = field(init=False, default=False)
    """The handler returned: a write took effect. Whatever fails after (converting, storing,
    observing) reports it applied, and its claim is kept with the result, never released."""
    settled: Outcome | None = field(init=False, default=None)
    """The tool's status check settled an earlier attempt's unknown outcome during this call
    (``reconcile``): applied or not applied. Telemetry adds a ``guard.outcome.settled`` span."""
    problems: tuple[Problem, ...] = field(init=False, default=())
    attempts: int = field(init=False, default=0)
    retries: tuple[RetryRecord, ...] = field(init=False, default=())
    now: float = 0.0
    """The clock's reading when the call entered the pipeline: one time for every stage's decision."""
    chain: tuple[str, ...] = ()
    """Names of the stages in the order they run for this call."""
    marks: list[int] = field(init=False, default_factory=list)
    """Stage boundaries in ns: stage ``i`` ran from ``marks[i]`` to ``marks[i + 1]``. One clock read
    per boundary keeps the pipeline cheap; ``stages`` turns them into records when asked."""
    end_ns: int = field(init=False, default=0)
    result: ToolResult | None = field(init=False, default=None)
    waiter: Waiter = field(init=False, default=BLOCKING)
    """How the call waits on the world: blocking (``execute``) or on the event loop (``aexecute``)."""
    untrusted_text: tuple[str, ...] = field(init=False, default=())
    """Text of an untrusted result, for telemetry to scan for injected instructions."""
    result_data: dict[str, Any] | None = field(init=False, default=None)
    """The filtered result the model received."""
    warnings: tuple[Advisory, ...] = field(init=False, default=())
    """Warnings the checks raised; a call that succeeds carries them to the model."""
    previous_principal: Principal | None = field(init=False, default=None)
    """Set when this call changed the session's principal (an authenticating tool, or
    ``Session.authenticate`` before it): who the session acted for before."""
    shadowed: bool = field(init=False, default=False)
    """The call runs in shadow mode: rejections are recorded, not enforced."""
    shadow: ReasonCode | None = field(init=False, default=None)
    """Shadow mode: the code the gate would have answered with; the call ran anyway."""
    shadow_stage: str | None = field(init=False, default=None)
    """Shadow mode: the stage that would have ended the call."""
    shadow_fixable: bool = field(init=False, default=False)
    """Shadow mode: whether the model could have fixed the would-be rejection."""
    turns_marked: bool = False
    """The host marks turns (``Session.next_turn``): the per-turn ceiling applies."""
    deps: Any = None
    """The session's own dependencies, when it has them; None: the guard's (``Env.deps``)."""

    @property
    def stages(self) -> list[StageRecord]:
        """The stages that ran, in order, each with its timing and how it ended."""
        last = len(self.marks) - 2
        return [self.stage_record(i, self.result if i == last else None) for i in range(last + 1)]

    def stage_record(self, index: int, result: ToolResult | None) -> StageRecord:
        """The record of stage ``index``, which just ended with ``result`` (None: it passed)."""
        return StageRecord(
            name=self.chain[index],
            start_ns=self.marks[index],
            end_ns=self.marks[index + 1],
            outcome=stage_outcome(result),
            code=None if result is None else result.code,
        )

    @property
    def rejected_stage(self) -> str | None:
        """The stage that ended the call unsuccessfully, if any."""
        if self.result is None or self.result.ok or len(self.marks) < 2:
            return None
        return self.chain[len(self.marks) - 2]


def stage_outcome(result: ToolResult | None) -> str:
    """How a stage that answered ``result`` ended: the one place the rule is written.

    ``pass`` (None: on to the next stage), ``final`` (the call ends successfully here) or
    ``reject`` (it ends unsuccessfully)."""
    return "pass" if result is None else "final" if result.ok else "reject"
