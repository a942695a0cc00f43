"""Stage 0: cheap ceilings that need no arguments: capacity, steps, rate, the validation-failure budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject
from guard.stores.base import Ceiling

__all__ = ["BudgetStage"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetStage:
    """Every call counts as a step, rejected ones too: a model that keeps failing still burns budget.

    Split in three so a store that batches (Redis) can count the ceilings with the loop counter in
    one round trip (``guard.batching``): ``admit``, ``plan`` (the ceilings, nothing counted yet)
    and ``judge`` (the answer, from their values)."""

    env: Env
    name: str = "budget"
    _sessions: dict[str, tuple[Ceiling, Ceiling]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Each session's step and invalid-streak ceilings, which only its id changes: built once,
    not on every call. Bounded like ``RecentMarks``: forgetting a session costs a rebuild."""

    def __call__(self, call: Call) -> ToolResult | None:
        if (full := self.admit(call)) is not None:
            return full
        return self.judge(call, self.env.counters.ceilings(self.plan(call), now=call.now))

    def admit(self, call: Call) -> ToolResult | None:
        """SESSION_LIMIT when the store is full: new sessions are refused, never forgotten."""
        if self.env.counters.admits(f"steps:{call.session_id}", now=call.now):
            return None
        return reject(
            call,
            Code.SESSION_LIMIT,
            "The service is at capacity and cannot start this conversation's tools. Nothing "
            "was done. Do not retry; tell the user to try again later.",
        )

    def plan(self, call: Call) -> list[Ceiling]:
        """The ceilings, in the order they are judged: steps, the turn's steps, the rate window,
        then the invalid streak (read, not counted: the pipeline counts it once the call answers).
        Each stops the call once over its limit, so the streak's limit is one below the most
        invalid calls in a row allowed."""
        policy, sid = self.env.policy, call.session_id
        steps, invalid = self._sessions.get(sid) or self._session(sid)
        ceilings = [steps]
        if call.turns_marked:  # a host that never marks turns gets the session ceiling only
            turn = Ceiling(f"turn:{sid}:{call.turn}", policy.max_steps_per_turn, policy.session_ttl)
            ceilings.append(turn)
        if (rate := policy.rate_limit) is not None:
            window = int(call.now // rate.seconds)
            ceilings.append(Ceiling(f"rate:{sid}:{window}", rate.calls, rate.seconds * 2))
        ceilings.append(invalid)
        return ceilings

    def _session(self, sid: str) -> tuple[Ceiling, Ceiling]:
        policy = self.env.policy
        if len(self._sessions) >= _SESSIONS:
            self._sessions.clear()
        pair = (
            Ceiling(f"steps:{sid}", policy.max_steps_per_session, policy.session_ttl),
            Ceiling(f"invalid:{sid}", policy.max_invalid_in_a_row - 1),
        )
        self._sessions[sid] = pair
        return pair

    def judge(self, call: Call, values: Sequence[int]) -> ToolResult | None:
        """The answer from the values of ``plan``'s ceilings, which stop at the first one over."""
        policy, counted = self.env.policy, iter(values)
        call.step = next(counted)
        if call.step > policy.max_steps_per_session:
            return reject(call, Code.STEP_LIMIT, _STOP + " This session used all its tool calls.")
        if call.turns_marked and next(counted) > policy.max_steps_per_turn:
            return reject(call, Code.STEP_LIMIT, _STOP + " This turn used all its tool calls.")
        if (rate := policy.rate_limit) is not None and next(counted) > rate.calls:
            return reject(
                call, Code.RATE_LIMITED, "Too many tool calls too fast; wait, then retry once."
            )
        call.invalid_streak = next(counted)
        if call.invalid_streak >= policy.max_invalid_in_a_row:
            return reject(
                call,
                Code.VALIDATION_BUDGET_EXHAUSTED,
                f"{call.invalid_streak} invalid tool calls in a row. Stop calling tools: ask the user "
                "for the missing information or hand the conversation to a human.",
            )
        return None


_SESSIONS = 4096
"""Sessions whose ceilings the stage keeps built."""

_STOP = "Stop calling tools and answer the user with what you have, or hand over to a human."
