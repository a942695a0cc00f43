"""The start of the default chain on a store that batches (Redis): the budget's ceilings and the
loop counter counted in one round trip.

The budget stage runs first and the idempotency stage's loop counter needs the validated
arguments, so on their own they wait on the server twice per call. The stages between them
(resolve, parse, schema) touch no store, so here the budget only plans its ceilings, those
stages run, and the ceilings go to the store with the loop counter after them, in one call that
stops at the first counter over its limit (``CounterStore.ceilings``): a call the budget ends
counts no loop, as before. A write's claim goes in the same call when the idempotency store can
make it there (``ClaimsAfterCounting``: Redis), made only when no counter is over its limit; the
idempotency stage then takes it from ``call.claim_ahead`` instead of claiming itself.

The answers are the chain's, in its order: the budget's comes first. When it ends the call, the
call is put back as the budget left it (what resolve, parse and schema filled in is undone, and
its span covers the wait), so observers, the invalid streak and the result are what the budget
stage alone would have given. When resolve, parse or schema ends the call instead, the ceilings
are counted then, without the loop counter, and the budget's answer still comes first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import fields

from guard.call import Call
from guard.clock import Clock
from guard.result import ToolResult
from guard.stages import BudgetStage, IdempotencyStage, PolicyStage, RuleStage, Stage
from guard.stores.base import (
    Ceiling,
    Claim,
    ClaimAsk,
    ClaimState,
    CounterStore,
    IdempotencyStore,
)

__all__ = ["BatchedStart", "ReadAhead"]

log = logging.getLogger("guard")

_FIELDS = tuple(field.name for field in fields(Call))

ClaimAfter = Callable[..., tuple[list[int], Claim | None]]
"""A store's ``claim_after`` (``ClaimsAfterCounting``)."""

_NEVER = 2**63 - 1
"""The limit of a counter only read ahead: no value is over it."""


class BatchedStart:
    """Runs a chain from the budget up to (not including) its idempotency stage, counting the
    budget's ceilings with the loop counter. Reads the chain at every call, so a stage replaced
    in it (``Guard.stages``) runs here too."""

    __slots__ = ("_clock", "_counters", "_failed", "at")

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        counters: CounterStore,
        clock: Clock,
        failed: Callable[[Call, Stage], ToolResult],
    ) -> None:
        self.at = next(i for i, stage in enumerate(stages) if isinstance(stage, IdempotencyStage))
        """Where the idempotency stage is: the rest of the chain starts there."""
        self._counters, self._clock, self._failed = counters, clock, failed

    @staticmethod
    def fits(stages: Sequence[Stage]) -> bool:
        """Whether ``stages`` start with the budget and reach the idempotency stage."""
        return (
            bool(stages)
            and isinstance(stages[0], BudgetStage)
            and any(isinstance(stage, IdempotencyStage) for stage in stages)
        )

    def applies(self, stages: Sequence[Stage]) -> bool:
        """Whether ``stages`` still have the budget first and the idempotency stage at ``at``."""
        return (
            len(stages) > self.at
            and isinstance(stages[0], BudgetStage)
            and isinstance(stages[self.at], IdempotencyStage)
        )

    def __call__(self, call: Call, stages: Sequence[Stage]) -> ToolResult | None:
        """The call's result if it ends before the idempotency stage; None to go on from there
        (``stages[at:]``, the loop counter counted in ``call.loop_count``). ``call.marks`` holds
        one boundary per stage that ran, as the pipeline's loop keeps it."""
        budget, idempotency = stages[0], stages[self.at]
        assert isinstance(budget, BudgetStage) and isinstance(idempotency, IdempotencyStage)
        marks, time_ns = call.marks, self._clock.time_ns
        marks.append(time_ns())
        if (full := budget.admit(call)) is not None:
            marks.append(time_ns())
            return full
        ceilings, before = budget.plan(call), [getattr(call, name) for name in _FIELDS]
        marks.append(time_ns())
        try:
            for index in range(1, self.at):  # resolve, parse, schema: no store, never awaited
                stage = stages[index]
                try:
                    result = stage(call)
                except Exception:
                    result = self._failed(call, stage)
                marks.append(time_ns())
                if result is not None:
                    assert isinstance(result, ToolResult)
                    return self._count(call, budget, before, ceilings)[1] or result
        except BaseException:  # interrupted: the step still counts, as it had before
            self._count(call, budget, before, ceilings)
            raise
        try:
            loop = idempotency.loop(call)
            reads = [Ceiling(key, _NEVER) for key in _reads(call, stages[self.at + 1 :])]
        except Exception:  # the stage that cannot name them fails in its own place, as in _loop
            loop, reads = None, []
        counted = ceilings if loop is None else [*ceilings, loop]
        store = idempotency.env.idempotency
        claims = getattr(store, "claim_after", None)
        claiming: tuple[ClaimAsk, ClaimAfter, IdempotencyStore] | None = None
        if claims is not None and loop is not None:
            try:
                ask = idempotency.ask(call)
            except Exception:  # the stage fails in its own place, as in _loop
                ask = None
            if ask is not None:  # a write: its claim goes with the counts
                claiming = (ask, claims, store)
        values, refused = self._count(call, budget, before, [*counted, *reads], claiming)
        if refused is not None:
            return refused
        if loop is not None:
            call.loop_count = values[len(counted) - 1]
        if len(values) > len(counted):  # the loop counter let it on: every read was made
            made = zip(reads, values[len(counted) :], strict=True)
            call.counts = {read.key: value for read, value in made}
        return None

    def _count(
        self,
        call: Call,
        budget: BudgetStage,
        before: list[object],
        ceilings: list[Ceiling],
        claiming: tuple[ClaimAsk, ClaimAfter, IdempotencyStore] | None = None,
    ) -> tuple[list[int], ToolResult | None]:
        """Count ``ceilings`` (one round trip), and make the write's claim after them when
        ``claiming`` says how (``ClaimsAfterCounting``): their values, and the budget's answer if
        it ends the call (None if it lets the call on), the call then put back as the budget
        left it. The claim, made only when no ceiling is over its limit, waits in
        ``call.claim_ahead`` for the idempotency stage."""
        claim: Claim | None = None
        try:
            if claiming is None:
                values = self._counters.ceilings(ceilings, now=call.now)
            else:
                values, claim = claiming[1](self._counters, ceilings, claiming[0], now=call.now)
            if budget.judge(call, values) is None:
                if claim is not None:
                    call.claim_ahead = claim
                    # Held from here: an interruption before the stage answers still lets it go.
                    call.claimed = claim.state is ClaimState.CLAIMED
                return values, None
        except Exception:  # the budget stage failed, as the pipeline's loop records it
            self._undo(call, before)
            failed = self._failed(call, budget)
            call.marks.append(self._clock.time_ns())
            return [], failed
        if claim is not None and claim.state is ClaimState.CLAIMED and claiming is not None:
            claiming[2].release(claiming[0].key)  # refused by the budget after all: let it go
        self._undo(call, before)
        refused = budget.judge(call, values)  # again, on the call as the budget left it
        call.marks.append(self._clock.time_ns())
        return values, refused

    @staticmethod
    def _undo(call: Call, before: list[object]) -> None:
        """Put back every field as it was when the budget planned: nothing after it ran. Its
        stage boundary goes too: the budget's span ends when its answer is known."""
        for name, value in zip(_FIELDS, before, strict=True):
            setattr(call, name, value)
        del call.marks[1:]


class ReadAhead:
    """Runs a resumed chain (an approval: no budget) up to its idempotency stage, then asks the
    counter store for the marks the rules and policy stages will read (``CounterStore.ahead``):
    on Redis they ride unawaited with the claim, so they cost no round trip of their own."""

    __slots__ = ("_counters", "_failed", "_time_ns", "at")

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        counters: CounterStore,
        clock: Clock,
        failed: Callable[[Call, Stage], ToolResult],
    ) -> None:
        self.at = next(i for i, stage in enumerate(stages) if isinstance(stage, IdempotencyStage))
        self._counters, self._time_ns, self._failed = counters, clock.time_ns, failed

    def applies(self, stages: Sequence[Stage]) -> bool:
        """Whether ``stages`` still have the idempotency stage at ``at``."""
        return len(stages) > self.at and isinstance(stages[self.at], IdempotencyStage)

    def __call__(self, call: Call, stages: Sequence[Stage]) -> ToolResult | None:
        """The call's result if it ends before the idempotency stage; None to go on from there
        (``stages[at:]``), the reads asked for in ``call.counts``."""
        marks, time_ns = call.marks, self._time_ns
        marks.append(time_ns())
        for index in range(self.at):  # resolve, parse, schema: no store, never awaited
            stage = stages[index]
            try:
                result = stage(call)
            except Exception:
                result = self._failed(call, stage)
            marks.append(time_ns())
            if result is not None:
                assert isinstance(result, ToolResult)
                return result
        try:
            keys = _reads(call, stages[self.at + 1 :])
        except Exception:  # the stage that cannot name them fails in its own place, as in _loop
            keys = []
        if keys:
            try:
                call.counts = self._counters.ahead(keys, now=call.now)
            except Exception:  # the stages read for themselves, and a store that fails fails there
                log.warning("reading ahead for call %s failed", call.call_id, exc_info=True)
        return None


def _reads(call: Call, stages: Sequence[Stage]) -> list[str]:
    """The counters the rules and policy stages among ``stages`` will read, each once."""
    keys = [
        key
        for stage in stages
        if isinstance(stage, RuleStage | PolicyStage)
        for key in stage.reads(call)
    ]
    return list(dict.fromkeys(keys))
