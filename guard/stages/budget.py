"""Stage 0: cheap ceilings that need no arguments: capacity, steps, rate, the validation-failure budget."""

from __future__ import annotations

from dataclasses import dataclass

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["BudgetStage"]


@dataclass(frozen=True, kw_only=True, slots=True)
class BudgetStage:
    """Every call counts as a step, rejected ones too: a model that keeps failing still burns budget."""

    env: Env
    name: str = "budget"

    def __call__(self, call: Call) -> ToolResult | None:
        policy, counters = self.env.policy, self.env.counters
        now, ttl, sid = call.now, policy.session_ttl, call.session_id
        steps = f"steps:{sid}"
        if not counters.admits(steps, now=now):  # a full store refuses sessions, never forgets
            return reject(
                call,
                Code.SESSION_LIMIT,
                "The service is at capacity and cannot start this conversation's tools. Nothing "
                "was done. Do not retry; tell the user to try again later.",
            )
        # The streak is read with the step count (one round trip on Redis); it is used only once
        # the ceilings below let the call through, and reading it changes nothing.
        call.step, streak = counters.tally([(steps, ttl)], now=now, reads=(f"invalid:{sid}",))
        if call.step > policy.max_steps_per_session:
            return reject(call, Code.STEP_LIMIT, _STOP + " This session used all its tool calls.")
        if call.turns_marked:  # a host that never marks turns gets the session ceiling only
            turn_steps = counters.incr(f"turn:{sid}:{call.turn}", now=now, ttl=ttl)
            if turn_steps > policy.max_steps_per_turn:
                return reject(call, Code.STEP_LIMIT, _STOP + " This turn used all its tool calls.")
        if (rate := policy.rate_limit) is not None:
            window = int(now // rate.seconds)
            used = counters.incr(f"rate:{sid}:{window}", now=now, ttl=rate.seconds * 2)
            if used > rate.calls:
                return reject(
                    call, Code.RATE_LIMITED, "Too many tool calls too fast; wait, then retry once."
                )
        call.invalid_streak = streak
        if call.invalid_streak >= policy.max_invalid_in_a_row:
            return reject(
                call,
                Code.VALIDATION_BUDGET_EXHAUSTED,
                f"{call.invalid_streak} invalid tool calls in a row. Stop calling tools: ask the user "
                "for the missing information or hand the conversation to a human.",
            )
        return None


_STOP = "Stop calling tools and answer the user with what you have, or hand over to a human."
