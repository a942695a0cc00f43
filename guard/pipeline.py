"""The Guard: runs every proposed call through the stages, one loop, and always answers with a result."""

from __future__ import annotations

import json
import logging
from collections.abc import Coroutine, Iterable, Mapping
from typing import Any

from guard.batching import BatchedStart, ReadAhead
from guard.call import Call
from guard.clock import Clock, SystemClock
from guard.codes import Code, DomainCode
from guard.errors import ConfigurationError, GuardError
from guard.observe import NullObserver, Observer, wants_stage_events
from guard.policy import Policy
from guard.provenance import ledger_for
from guard.refusals import Refusals, check_refusals
from guard.registry import ToolRegistry, ToolSpec
from guard.result import Outcome, ToolResult
from guard.session import Principal
from guard.stages import Env, IdempotencyStage, Stage, default_chain, reject
from guard.stages.confirm import seal_key, sealed
from guard.stages.execute import APPLIED_UNSHOWN
from guard.stages.idempotency import lock_of, stored
from guard.stores.base import (
    ApprovalState,
    ApprovalStore,
    ClaimState,
    CounterStore,
    IdempotencyStore,
    PendingAction,
)
from guard.stores.memory import MemoryApprovalStore, MemoryCounterStore, MemoryIdempotencyStore
from guard.waiting import AWAITING, run_blocking

__all__ = ["ApprovalNotFound", "Guard", "PrincipalSwitch", "Session"]

log = logging.getLogger("guard")

_INVALID = frozenset({Code.INVALID_JSON, Code.INVALID_ARGUMENTS, Code.UNKNOWN_TOOL})
"""Codes that count towards the validation-failure budget: the model keeps sending malformed calls."""

_ALWAYS_ENFORCED = frozenset(
    {
        Code.UNKNOWN_TOOL,
        Code.INVALID_JSON,
        Code.INVALID_ARGUMENTS,
        Code.IN_PROGRESS,
        Code.IDEMPOTENCY_CONFLICT,
        Code.INTERNAL_ERROR,
    }
)
"""Shadow mode still answers these: without valid arguments (or with the same write already
running) there is nothing the host could have run without the gate either."""


class ApprovalNotFound(GuardError, LookupError):
    """The host named an approval id the store does not know."""


class PrincipalSwitch(GuardError, PermissionError):
    """``Session.authenticate`` was asked to move an identified session to another user."""


class Guard:
    """The deterministic gate between a model's proposed tool calls and the world.

    Build one per deployment and share it; it holds no per-session state of its own (the stores do)::

        guard = Guard(tools=[get_order, refund_order], policy=policy)
        session = guard.session("conv-42", Principal(id="CUS-1", role="customer", scopes=...))
        result = session.execute("get_order", '{"order_id": "ORD-1001"}', call_id="call_1")
    """

    def __init__(
        self,
        *,
        tools: Iterable[ToolSpec],
        policy: Policy,
        idempotency: IdempotencyStore | None = None,
        approvals: ApprovalStore | None = None,
        counters: CounterStore | None = None,
        clock: Clock | None = None,
        observer: Observer | None = None,
        deps: Any = None,
        codes: Iterable[DomainCode] = (),
        shadow: bool | Iterable[str] = False,
        refusals: Refusals | None = None,
        approval_key: bytes | str | None = None,
    ) -> None:
        """``deps`` is handed to every check and handler (``ctx.deps``); ``codes`` adds the
        deployment's own codes to those its tools declare; ``shadow`` (True, or tool names) runs
        every stage, records what the gate would have decided, then runs the call regardless;
        ``refusals`` maps the tool library's exceptions to refusal codes for every tool
        (``guard.refusals``). ``approval_key`` seals pending actions (default
        ``$CALLGATE_MASKING_KEY``, else a key of this process: set it where another process or a
        restart runs what this one filed)."""
        refusals = dict(refusals or {})
        check_refusals(refusals, "Guard(refusals=...)")
        mapped = [code for code in refusals.values() if isinstance(code, DomainCode)]
        self.registry = ToolRegistry(tools, codes=[*codes, *mapped])
        self.policy = policy
        _check_leases(self.registry, policy)
        self.shadow_all = shadow is True
        self.shadow_tools: frozenset[str] = (
            frozenset() if isinstance(shadow, bool) else frozenset(shadow)
        )
        if unknown := sorted(self.shadow_tools - set(self.registry)):
            raise ConfigurationError(f"shadow names unknown tools: {', '.join(unknown)}")
        self._shadowing = self.shadow_all or bool(self.shadow_tools)
        counters = counters if counters is not None else MemoryCounterStore()
        self.env = Env(
            registry=self.registry,
            policy=policy,
            idempotency=idempotency if idempotency is not None else MemoryIdempotencyStore(),
            approvals=approvals if approvals is not None else MemoryApprovalStore(),
            counters=counters,
            clock=clock if clock is not None else SystemClock(),
            observer=observer if observer is not None else NullObserver(),
            deps=deps,
            refusals=refusals,
            provenance=ledger_for(self.registry, policy, counters),
            seal_key=seal_key(approval_key),
        )
        self.stages: list[Stage] = default_chain(self.env)
        self._resume_stages = self.stages[1:]  # a resumed call already paid its budget
        self._confirm_stages = [s for s in self.stages if s.name == "confirm"]
        self._names = {
            id(chain): tuple(stage.name for stage in chain)
            for chain in (self.stages, self._resume_stages, self._confirm_stages)
        }
        self._time_ns = self.env.clock.time_ns
        # The null observer is skipped outright: an uninstrumented guard pays nothing for observing.
        self._live = not isinstance(self.env.observer, NullObserver)
        self._stage_events = self._live and wants_stage_events(self.env.observer)
        # A store that batches counts the budget's ceilings with the loop counter (one round
        # trip, guard.batching); stage events and shadow mode take the plain loop.
        self._batched: BatchedStart | None = None
        self._ahead: ReadAhead | None = None
        if (
            getattr(counters, "batches", False)
            and not (self._stage_events or self._shadowing)
            and BatchedStart.fits(self.stages)
        ):
            self._batched = BatchedStart(
                self.stages, counters=counters, clock=self.env.clock, failed=_stage_failed
            )
            self._ahead = ReadAhead(
                self._resume_stages, counters=counters, clock=self.env.clock, failed=_stage_failed
            )

    @property
    def observer(self) -> Observer:
        return self.env.observer

    def session(
        self, session_id: str, principal: Principal, *, turn: int | None = None, deps: Any = None
    ) -> Session:
        """A handle for one conversation acting for ``principal``.

        Hosts that rebuild the handle per request pass the conversation's ``turn`` (the number of
        user messages so far): the per-turn ceiling then applies as if ``next_turn`` had been called.
        ``deps`` replaces the guard's ``deps`` for this session's checks and handlers (a client
        bound to the user's tenant, a per-conversation backend)."""
        session = Session(self, session_id, principal, turn=turn)
        session.deps = deps
        return session

    def execute(
        self,
        session: Session,
        name: str,
        raw_arguments: str | Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """Run one proposed call. Never raises for anything the model sent."""
        call = self._start(session, name, raw_arguments, call_id, self.stages)
        return self._run(call, self.stages, session)

    async def aexecute(
        self,
        session: Session,
        name: str,
        raw_arguments: str | Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """``execute`` for async hosts: coroutine handlers run on the caller's event loop."""
        call = self._start(session, name, raw_arguments, call_id, self.stages)
        return await self._arun(call, self.stages, session)

    def pending(self, approval_id: str) -> PendingAction | None:
        """The pending action to show an approver: tool, validated arguments, expiry."""
        return self.env.approvals.get(approval_id)

    def approve(self, approval_id: str, *, by: str, deps: Any = None) -> ToolResult:
        """A human approves: the call resumes, rules run again against current state, then it runs.

        ``deps``: the session's own dependencies, if it had any (``session(..., deps=...)``); the
        approval is resumed outside the session handle, so the guard's are used otherwise."""
        call, stages = self._resume(approval_id, approve=True, by=by)
        call.deps = deps
        return self._run(call, stages)

    def deny(self, approval_id: str, *, by: str) -> ToolResult:
        """A human declines: the call ends CONFIRMATION_DENIED, nothing runs."""
        return self._decide(approval_id, approve=False, by=by)

    async def aapprove(self, approval_id: str, *, by: str, deps: Any = None) -> ToolResult:
        """``approve`` for async hosts: a coroutine handler runs on the caller's event loop."""
        call, stages = self._resume(approval_id, approve=True, by=by)
        call.deps = deps
        return await self._arun(call, stages)

    async def adeny(self, approval_id: str, *, by: str) -> ToolResult:
        """``deny`` for async hosts."""
        call, stages = self._resume(approval_id, approve=False, by=by)
        return await self._arun(call, stages)

    # -- the loop ---------------------------------------------------------------------------------

    def _run(self, call: Call, stages: list[Stage], session: Session | None = None) -> ToolResult:
        """The loop, blocking: it never suspends, so one step runs it to the end."""
        try:
            result = run_blocking(self._loop_for(call, stages))
        except BaseException:
            self._interrupted(call)
            raise
        if session is not None and call.spec is not None and call.spec.authenticates is not None:
            result = self._bind(session, call, result)
        return self._finish(call, result)

    async def _arun(
        self, call: Call, stages: list[Stage], session: Session | None = None
    ) -> ToolResult:
        """The loop, awaited on the caller's event loop."""
        call.waiter = AWAITING
        try:
            result = await self._loop_for(call, stages)
        except BaseException:  # cancelled (a client went away), or interrupted
            self._interrupted(call)
            raise
        if session is not None and call.spec is not None and call.spec.authenticates is not None:
            result = self._bind(session, call, result)
        return self._finish(call, result)

    def _loop_for(self, call: Call, stages: list[Stage]) -> Coroutine[Any, Any, ToolResult]:
        start, ahead = self._batched, self._ahead
        if start is not None and stages is self.stages and start.applies(stages):
            return self._loop_batched(call, stages, start)
        if ahead is not None and stages is self._resume_stages and ahead.applies(stages):
            if call.marks:  # _resume_ahead ran the chain up to its claim already
                return self._loop(call, stages[ahead.at :], marked=True)
            return self._loop_batched(call, stages, ahead)
        return self._loop(call, stages)

    async def _loop_batched(
        self, call: Call, stages: list[Stage], start: BatchedStart | ReadAhead
    ) -> ToolResult:
        """The loop on a store that batches: the chain up to the idempotency stage counts the
        budget's ceilings with the loop counter in one round trip, or (an approval) asks for
        the marks the later stages read, to ride with the claim (``guard.batching``)."""
        result = start(call, stages)
        if result is not None:
            return result
        return await self._loop(call, stages[start.at :], marked=True)

    async def _loop(self, call: Call, stages: list[Stage], *, marked: bool = False) -> ToolResult:
        """The one loop. A stage passes (None), ends the call (a result), or is awaited first
        (execute, which waits on the world through ``call.waiter``). ``marked``: the stages before
        ``stages`` ran already and left their boundaries in ``call.marks``."""
        observer = self.env.observer if self._stage_events else None
        marks, time_ns = call.marks, self._time_ns
        if not marked:
            marks.append(time_ns())
        for stage in stages:
            if observer is not None:
                _notify(observer.stage_started, call, stage.name)
            try:
                result = stage(call)
                if result is not None and not isinstance(result, ToolResult):
                    result = await result
            except Exception:
                result = _stage_failed(call, stage)
            marks.append(time_ns())
            if observer is not None:
                _notify(observer.stage_ended, call, call.stage_record(len(marks) - 2, result))
            if result is not None:
                if (
                    self._shadowing
                    and call.shadowed
                    and _waived(call, stage, result, self.registry)
                ):
                    continue  # shadow mode: recorded, not enforced
                return result
        raise AssertionError("the execute stage always answers")  # pragma: no cover

    # -- around the loop --------------------------------------------------------------------------

    def _start(
        self,
        session: Session,
        name: str,
        raw_arguments: str | Mapping[str, Any] | None,
        call_id: str | None,
        stages: list[Stage],
    ) -> Call:
        if raw_arguments is not None and not isinstance(raw_arguments, str):
            try:  # providers that send objects (Anthropic, MCP): keep the text form for the record
                raw_arguments = json.dumps(raw_arguments)
            except (TypeError, ValueError):
                raw_arguments = None
        call = Call(
            tool=str(name),
            raw_arguments=raw_arguments,
            call_id=call_id,
            session_id=session.id,
            principal=session.principal,
            turn=session.turn,
            start_ns=self._time_ns(),
            now=self.env.clock.now(),
            chain=self._names[id(stages)],
            turns_marked=session.turns_marked,
            deps=session.deps,
        )
        session.called = True
        if session.previous_principal is not None:  # Session.authenticate: audited on this call
            call.previous_principal, session.previous_principal = session.previous_principal, None
        if self._shadowing:
            call.shadowed = self.shadow_all or call.tool in self.shadow_tools
        if self._live:
            _notify(self.env.observer.call_started, call)
        return call

    def _finish(self, call: Call, result: ToolResult) -> ToolResult:
        env = self.env
        try:
            if call.claimed and call.idempotency_key is not None:
                self._settle_claim(call, result)
            if call.step:  # the budget stage ran: keep the invalid streak
                key = f"invalid:{call.session_id}"
                if result.code in _INVALID:
                    ttl = env.policy.invalid_streak_ttl or env.policy.session_ttl
                    env.counters.incr(key, now=call.now, ttl=ttl)
                elif call.invalid_streak and call.arguments is not None:
                    env.counters.reset(key)
        except Exception:
            log.exception("settling call %s failed", call.call_id)
        if call.shadow is not None:
            result.shadow = call.shadow
        call.result = result
        call.end_ns = call.marks[-1] if call.marks else self._time_ns()
        if self._live:
            _notify(env.observer.call_ended, call, result)
        return result

    def _bind(self, session: Session, call: Call, result: ToolResult) -> ToolResult:
        """An authenticating tool succeeded: the principal it names now acts for the session.

        Counters, taint and approvals are keyed by session, so they carry over. A session already
        bound to a user stays bound: a lookup naming someone else is refused and shows nothing."""
        spec = call.spec
        if spec is None or spec.authenticates is None or not result.ok:
            return result
        try:
            found = spec.authenticates(result.data, session.principal)
        except Exception:
            log.exception("authenticator of %s raised", spec.name)
            return reject(call, Code.INTERNAL_ERROR, _INTERNAL, outcome=Outcome.APPLIED)
        current = session.principal
        if found is None or found == current:
            return result
        if current.authenticated and found.id != current.id:
            return reject(
                call,
                Code.PERMISSION_DENIED,
                "This conversation already acts for an identified user; it cannot switch to "
                "another. Do not retry; a new conversation is needed for another user.",
                outcome=Outcome.APPLIED,
            )
        call.previous_principal, session.principal, call.principal = current, found, found
        return result

    def _settle_claim(self, call: Call, result: ToolResult) -> None:
        """A claim the call still holds: keep it with the result when the write took effect (the
        handler returned, whatever failed after) or its outcome is unknown and the backend cannot
        dedupe; else let go. Should recording fail, the claim stays in flight and goes stale:
        repeats get IN_PROGRESS, then TIMEOUT, never a second run (no release on any error)."""
        assert call.spec is not None and call.idempotency_key is not None
        env = self.env
        if call.returned or (
            result.outcome is Outcome.UNKNOWN and not call.spec.idempotent_backend
        ):
            text, keys = stored(result), [call.idempotency_key]
            if call.approval is not None:  # the model re-proposing the approved call: a replay
                keys.append(call.approval.proposal_key)
            for key in keys:
                env.idempotency.complete(
                    key, call.fingerprint or "", text, now=call.now, ttl=env.policy.idempotency_ttl
                )
        else:
            if result.outcome is Outcome.UNKNOWN:
                # The backend dedupes, so this session may retry under its own key; the actor's
                # other sessions may not run it anew under theirs: the lock keeps "unknown".
                # Recorded while this claim still holds the lock, so the lock stays this
                # session's (its retry is free) and the release below leaves it in place.
                env.idempotency.complete(
                    lock_of(call),
                    call.fingerprint or "",
                    stored(result),
                    now=call.now,
                    ttl=env.policy.idempotency_ttl,
                )
            env.idempotency.release(call.idempotency_key)
        call.claimed = False

    def _interrupted(self, call: Call) -> None:
        """The call was cancelled or interrupted (``CancelledError``, ``KeyboardInterrupt``: not an
        ``Exception``) before it had a result. It still ends, so the trail records it and a claim
        it holds is not left to go stale without a word: if a handler attempt of a write started,
        the outcome is unknown, and a backend that cannot deduplicate gets it recorded under the
        key (repeats replay TIMEOUT); otherwise the claim is released."""
        started = call.attempts > 0 and call.spec is not None and call.spec.is_write
        result = reject(
            call,
            Code.TIMEOUT,
            "The call was interrupted before it answered"
            + (
                f": the action may or may not have happened (key {call.idempotency_key}). "
                "Do not retry it; check its status first."
                if started
                else ". Nothing was done."
            ),
            outcome=Outcome.UNKNOWN if started else Outcome.NOT_APPLIED,
        )
        call.marks.append(self._time_ns())  # the stage in progress ends here
        self._finish(call, result)

    def _decide(self, approval_id: str, *, approve: bool, by: str) -> ToolResult:
        call, stages = self._resume(approval_id, approve=approve, by=by)
        return self._run(call, stages)

    def _resume(self, approval_id: str, *, approve: bool, by: str) -> tuple[Call, list[Stage]]:
        if approve:
            # Checked before the decision is recorded: an approval recorded here for an action
            # this process cannot verify (edited, or sealed with another key) would stand in the
            # store, and a process that can verify it would run what this one said did not run.
            filed = self.env.approvals.get(approval_id)
            if filed is not None and not sealed(filed, self.env.seal_key):
                approve, by = False, f"{by} (refused: the action's seal did not verify)"
            elif filed is not None and (resumed := self._resume_ahead(filed, by)) is not None:
                return resumed
        action = self.env.approvals.decide(
            approval_id, approve=approve, by=by, now=self.env.clock.now()
        )
        if action is None:
            raise ApprovalNotFound(approval_id)
        return self._resumed(action)

    def _resumed(self, action: PendingAction) -> tuple[Call, list[Stage]]:
        """The call that resumes ``action`` as decided, and the chain it takes."""
        # A seal that does not verify goes straight to confirm, which refuses it: no stage reads
        # facts someone may have edited (a forged principal, role or scopes) before that.
        approved = action.state is ApprovalState.APPROVED and sealed(action, self.env.seal_key)
        stages = self._resume_stages if approved else self._confirm_stages
        call = self._call_of(action, stages)
        if self._live:
            _notify(self.env.observer.call_started, call)
        return call, stages

    def _resume_ahead(self, filed: PendingAction, by: str) -> tuple[Call, list[Stage]] | None:
        """On a store that decides and claims in one step (``DecidesThenClaims``: Redis), approve
        ``filed``, whose seal verified, with one wait: the chain runs up to its claim on the action
        as filed, then the decision and the claim go to the store together, the claim made only
        if the action stands approved. None when that cannot apply (then the decision is made
        first, as on every store): another store, or a stage before the claim ends the call."""
        decides = getattr(self.env.approvals, "decide_then_claim", None)
        ahead, stages = self._ahead, self._resume_stages
        if decides is None or ahead is None or not ahead.applies(stages):
            return None
        call = self._call_of(filed, stages)
        idempotency = stages[ahead.at]
        assert isinstance(idempotency, IdempotencyStage)
        if ahead(call, stages) is not None:
            return None  # decided first, so the refusal comes after the decision, as always
        try:
            idempotency.loop(call)  # sets the fingerprint the claim is bound to
            ask = idempotency.ask(call)
        except Exception:  # the stage fails in its own place, after the decision
            return None
        if ask is None:
            return None
        store = idempotency.env.idempotency
        action, claim = decides(
            filed.id, approve=True, by=by, now=call.now, idempotency=store, ask=ask
        )
        if action is None:
            raise ApprovalNotFound(filed.id)
        if (
            action.state is ApprovalState.APPROVED
            and action.seal == filed.seal  # the facts the chain ran on: sealed alike, both verified
            and sealed(action, self.env.seal_key)
        ):
            call.approval, call.decision, call.claim_ahead = action, str(action.state), claim
            # Held from here: an interruption before the idempotency stage answers lets it go.
            call.claimed = claim is not None and claim.state is ClaimState.CLAIMED
            if self._live:
                _notify(self.env.observer.call_started, call)
            return call, stages
        if claim is not None and claim.state is ClaimState.CLAIMED:
            store.release(ask.key)  # not to run after all: the action changed under the decision
        return self._resumed(action)

    def _call_of(self, action: PendingAction, stages: list[Stage]) -> Call:
        """A call resuming ``action`` through ``stages``, as it was proposed."""
        principal = Principal(  # as proposed: an anonymous session's write stays anonymous
            id=action.principal_id,
            role=action.role,
            scopes=frozenset(action.scopes),
            authenticated=action.authenticated,
        )
        call = Call(
            tool=action.tool,
            raw_arguments=action.arguments,
            call_id=action.call_id,
            session_id=action.session_id,
            principal=principal,
            turn=0,
            start_ns=self._time_ns(),
            now=self.env.clock.now(),
            chain=self._names[id(stages)],
        )
        call.approval, call.decision = action, str(action.state)
        call.spec = self.registry.get(action.tool)
        return call


class Session:
    """One conversation: a principal, a session id, and the current turn.

    Turns: call ``next_turn`` on every user message (the first included, or not: a ``next_turn``
    before any call does not start a new turn). Each turn gets ``Policy.max_steps_per_turn`` calls.
    A host that never calls it gets only ``max_steps_per_session``: the per-turn ceiling applies
    once turns are marked, so long unmarked runs are never cut short by it.
    """

    def __init__(
        self, guard: Guard, session_id: str, principal: Principal, *, turn: int | None = None
    ) -> None:
        self.guard = guard
        self.id = session_id
        self.principal = principal
        """Who the session acts for now: an authenticating tool or ``authenticate`` changes it."""
        self.turn = 1 if turn is None else turn
        self.turns_marked = turn is not None
        """The host marks turns: the per-turn ceiling applies."""
        self.called = False
        """A call has run through this handle."""
        self.previous_principal: Principal | None = None
        """Set by ``authenticate`` until the next call records the change on its span."""
        self.deps: Any = None
        """This session's own dependencies (``Guard.session(..., deps=...)``); None: the guard's."""

    def vouch(self, *values: object) -> None:
        """Declare values as the user's own: their message (its e-mail addresses, IBANs, URLs and
        ids too), the principal's own records. After untrusted text, a sink argument may carry
        them without a human (argument-level ``Policy.taint_mode``). Kept in the counter store
        with the session's other state; a guard that keeps no provenance ignores them."""
        ledger = self.guard.env.provenance
        if ledger is not None:
            ledger.vouch(self.id, values, now=self.guard.env.clock.now())

    def next_turn(self) -> None:
        """Call on every new user message: the per-turn step budget starts again."""
        if self.called or self.turns_marked:
            self.turn += 1
        self.turns_marked = True

    def authenticate(self, principal: Principal, *, switch: bool = False) -> None:
        """Bind the user the host identified itself (a login, a verified token) mid-session.

        The session id stays, so step counters, taint and pending approvals carry over; the next
        call's span records the previous principal (``guard.principal.previous``). A session
        already bound to an identified user is not moved to another one (``PrincipalSwitch``),
        as an authenticating tool naming someone else is refused, unless the host says so with
        ``switch=True`` (an operator taking over a conversation)."""
        if principal == self.principal:
            return
        current = self.principal
        if current.authenticated and principal.id != current.id and not switch:
            raise PrincipalSwitch(
                f"session {self.id!r} acts for an identified user; binding another one needs "
                "authenticate(..., switch=True)"
            )
        if self.previous_principal is None:
            self.previous_principal = self.principal
        self.principal = principal

    def execute(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """Run one proposed call in this session. Never raises for anything the model sent."""
        return self.guard.execute(self, name, raw_arguments, call_id=call_id)

    async def aexecute(
        self,
        name: str,
        raw_arguments: str | Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """``execute`` for async hosts."""
        return await self.guard.aexecute(self, name, raw_arguments, call_id=call_id)


def _check_leases(registry: ToolRegistry, policy: Policy) -> None:
    """A write's claim must outlive the write: otherwise a slow owner's claim could be taken over
    while it still runs, and the two would race to release or complete the same key."""
    for spec in registry.values():
        if not spec.is_write:
            continue
        if spec.timeout is None:
            raise ConfigurationError(
                f"write tool {spec.name!r} needs a timeout (its claim has a lease)"
            )
        retry = spec.retry
        worst = spec.timeout * retry.attempts + retry.max_delay * (retry.attempts - 1)
        if worst >= policy.claim_lease:
            raise ConfigurationError(
                f"write tool {spec.name!r} may run {worst:g} s (timeout x attempts + backoff), "
                f"not less than the claim lease of {policy.claim_lease:g} s"
            )


def _waived(call: Call, stage: Stage, result: ToolResult, registry: ToolRegistry) -> bool:
    """Shadow mode: keep the first decision the gate would have taken, and go on as without it."""
    if result.ok or stage.name == "execute" or result.code in _ALWAYS_ENFORCED:
        return False
    if stage.name == "idempotency" and call.spec is not None and call.spec.is_write:
        return False  # a repeated write has no key of its own: without the gate it would run again
    if call.shadow is None:
        call.shadow, call.shadow_stage = result.code, stage.name
        call.shadow_fixable = bool(result.fixable)
    if call.spec is None and stage.name == "resolve":  # the tool exists: UNKNOWN_TOOL is enforced
        call.spec = registry.get(call.tool)
    return call.spec is not None


def _stage_failed(call: Call, stage: Stage) -> ToolResult:
    """A stage raised. After the handler returned the write took effect; after a handler attempt
    started it may have: the outcome says so, and ``_settle_claim`` keeps the claim for both."""
    log.exception("stage %s raised", stage.name)
    write = call.spec is not None and call.spec.is_write
    if call.returned:
        message = APPLIED_UNSHOWN if write else _INTERNAL
        return reject(call, Code.INTERNAL_ERROR, message, outcome=Outcome.APPLIED)
    started = write and call.attempts > 0
    outcome = Outcome.UNKNOWN if started else Outcome.NOT_APPLIED
    return reject(call, Code.INTERNAL_ERROR, _INTERNAL, outcome=outcome)


def _notify(method: Any, *args: Any) -> None:
    # Telemetry never breaks a tool call: an observer that raises is logged, never propagated.
    try:
        method(*args)
    except Exception:
        log.exception("observer failed")


_INTERNAL = "Something went wrong on our side. Do not retry; tell the user and offer a human agent."
