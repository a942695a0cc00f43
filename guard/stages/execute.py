"""Stage 8: run the handler with a timeout, bounded retries, and the same idempotency key every time."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from guard.call import Call, Reservation, RetryRecord
from guard.codes import Code
from guard.errors import RuleViolation, TransientError
from guard.refusals import as_refusal
from guard.registry import ToolContext
from guard.result import Outcome, ToolResult
from guard.stages.base import Env, reject
from guard.stages.idempotency import lock_of, stored
from guard.stages.policy import taint_key
from guard.stages.rules import refuse_undeclared, remember, seen_key

__all__ = ["APPLIED_UNSHOWN", "ExecuteStage"]

log = logging.getLogger("guard")

_INTERNAL = "Something went wrong on our side. Do not retry; tell the user and offer a human agent."
APPLIED_UNSHOWN = (
    "The action was done, but its result could not be shown because of a fault on our side. "
    "Do not retry it; tell the user it was done and offer a human agent for the details."
)
"""The message of a write that took effect and then failed on its way back (converting, storing)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecuteStage:
    """The only stage that touches the world.

    Failures are sorted by what they say about the world: ``RuleViolation`` is a refusal (nothing
    happened, never retried); ``TransientError`` and ``ConnectionError`` mean the request was not
    applied (retried); ``TimeoutError`` means it may have been (retried only when the backend honours
    idempotency keys; if every attempt fails a write ends TIMEOUT with outcome unknown). Anything else
    is a bug: logged with its traceback, and the model gets INTERNAL_ERROR.

    The body is written once, as a coroutine that waits through ``call.waiter`` (``guard.waiting``):
    it blocks under ``Guard.execute`` and awaits the caller's event loop under ``Guard.aexecute``. Sync handlers run on the calling thread and get their timeout in
    ``ToolContext.timeout`` to pass to their I/O; coroutine handlers are cancelled at the timeout.
    """

    env: Env
    name: str = "execute"

    async def __call__(self, call: Call) -> ToolResult:
        if call.reservations and (refused := self._reserve(call)) is not None:
            return refused
        spec, waiter = call.spec, call.waiter
        assert spec is not None
        while True:
            context = self._context(call)
            try:
                output = spec.handler(call.arguments, context)
                if spec.is_async:
                    output = await waiter.handler_result(output, spec.timeout)
            except Exception as error:
                after = self._failed(call, error)
                if isinstance(after, ToolResult):
                    return after
                await waiter.sleep(self.env.clock, after)
                continue
            call.returned = True  # from here on the write took effect, whatever fails next
            return self._succeeded(call, output)

    def _reserve(self, call: Call) -> ToolResult | None:
        counters, now = self.env.counters, self.env.clock.now()
        taken: list[Reservation] = []
        for share in call.reservations:
            if not counters.add_within(
                share.key, share.amount, share.limit, now=now, ttl=2 * 86_400
            ):
                for earlier in taken:
                    counters.incr(earlier.key, -earlier.amount, now=now, ttl=2 * 86_400)
                call.reservations = ()
                return reject(
                    call,
                    Code.POLICY_LIMIT,
                    "The daily limit would be exceeded. Do not retry today; offer a human agent.",
                )
            taken.append(share)
        return None

    def _release(self, call: Call) -> None:
        now = self.env.clock.now()
        for share in call.reservations:
            self.env.counters.incr(share.key, -share.amount, now=now, ttl=2 * 86_400)
        call.reservations = ()

    def _context(self, call: Call) -> ToolContext:
        assert call.spec is not None
        call.attempts += 1
        return ToolContext(
            principal=call.principal,
            session_id=call.session_id,
            call_id=call.call_id,
            idempotency_key=call.idempotency_key,
            attempt=call.attempts,
            timeout=call.spec.timeout,
            approval_id=call.approval.id if call.approval else None,
            deps=self.env.deps if call.deps is None else call.deps,
        )

    def _failed(self, call: Call, error: Exception) -> ToolResult | float:
        """The result that ends the call, or the seconds to wait before the next attempt."""
        spec = call.spec
        assert spec is not None
        error = as_refusal(error, spec.refusals, self.env.refusals) or error  # a library's own
        if isinstance(error, RuleViolation):  # the backend refused: nothing happened
            self._release(call)
            if (undeclared := refuse_undeclared(call, self.env, error.code)) is not None:
                return undeclared
            call.problems = error.problems
            return reject(call, error.code, error.message, data=error.data, fixable=error.fixable)
        timed_out = isinstance(error, TimeoutError)
        if not (timed_out or isinstance(error, TransientError | ConnectionError)):
            log.error("tool %s raised", spec.name, exc_info=error)
            failed = reject(
                call,
                Code.INTERNAL_ERROR,
                _INTERNAL,
                outcome=Outcome.UNKNOWN if spec.is_write else Outcome.NOT_APPLIED,
            )
            if spec.is_write and spec.idempotent_backend:
                self._keep_unknown(call, failed)
            return failed
        call.maybe_applied |= timed_out and spec.is_write
        may_retry = not (call.maybe_applied and not spec.idempotent_backend)
        if may_retry and call.attempts < spec.retry.attempts:
            delay = _backoff(
                spec.retry.base_delay, spec.retry.max_delay, call.attempts, spec.retry.jitter
            )
            retry = RetryRecord(
                attempt=call.attempts,
                error=type(error).__name__,
                delay=delay,
                at_ns=self.env.clock.time_ns(),
            )
            call.retries += (retry,)
            try:
                self.env.observer.retry_scheduled(call, retry)
            except Exception:
                log.exception("observer failed on retry_scheduled")
            return delay
        if call.maybe_applied:
            unknown = reject(
                call,
                Code.TIMEOUT,
                f"No answer in time: the action may or may not have happened (key "
                f"{call.idempotency_key}). Do not retry it; check its status first.",
                outcome=Outcome.UNKNOWN,
            )
            if spec.idempotent_backend:
                self._keep_unknown(call, unknown)
            return unknown
        self._release(call)
        return reject(
            call,
            Code.UPSTREAM_UNAVAILABLE,
            "The service is unavailable right now. Nothing was done; tell the user to try later.",
        )

    def _keep_unknown(self, call: Call, result: ToolResult) -> None:
        """A backend that deduplicates gets its claim released (this session may retry under the
        same key), but the actor's lock keeps the unknown outcome: another session would retry
        under another key, which the backend cannot match to this attempt."""
        try:
            self.env.idempotency.complete(
                lock_of(call),
                call.fingerprint or "",
                stored(result),
                now=self.env.clock.now(),
                ttl=self.env.policy.idempotency_ttl,
            )
        except Exception:  # the lock stays in flight and goes stale: others get TIMEOUT anyway
            log.exception("recording the unknown outcome of %s failed", call.idempotency_key)

    def _succeeded(self, call: Call, output: Any) -> ToolResult:
        spec, env = call.spec, self.env
        assert spec is not None and call.arguments is not None
        try:
            data = spec.visible(output)
        except Exception as error:  # the result model rejects it, or it is not JSON-able at all
            why = "its result model rejects" if isinstance(error, ValidationError) else "not JSON"
            log.exception("tool %s returned a result it cannot show (%s)", spec.name, why)
            # The pipeline keeps the claim with this result: a repeat replays it, never reruns.
            return reject(
                call,
                Code.INTERNAL_ERROR,
                APPLIED_UNSHOWN if spec.is_write else _INTERNAL,
                outcome=Outcome.APPLIED,
            )
        result = ToolResult(
            ok=True,
            code=Code.OK,
            message=f"{spec.name} succeeded.",
            data=data,
            outcome=Outcome.APPLIED,
            call_id=call.call_id,
            tool=call.tool,
            idempotency_key=call.idempotency_key,
            approval_id=call.approval.id if call.approval else None,
            warnings=call.warnings,
        )
        call.result_data = data
        now, policy = (env.clock.now() if call.attempts > 1 else call.now), env.policy
        if spec.is_write and call.idempotency_key is not None:
            text = stored(result)
            env.idempotency.complete(
                call.idempotency_key,
                call.fingerprint or "",
                text,
                now=now,
                ttl=policy.idempotency_ttl,
            )
            if call.approval is not None:  # the model re-proposing the approved call gets a replay
                env.idempotency.complete(
                    call.approval.proposal_key,
                    call.fingerprint or "",
                    text,
                    now=now,
                    ttl=policy.idempotency_ttl,
                )
            call.claimed = False
        if spec.record_field is not None:
            record = getattr(call.arguments, spec.record_field)
            key, ttl = seen_key(call.session_id, spec.name, record), policy.session_ttl
            env.marks.mark(env.counters, call.session_id, key, ("",), now=now, ttl=ttl)
        if spec.name in env.registry.kept:  # what later prerequisites of the session ask for
            remember(call, env, now)
        if env.provenance is not None:  # before the taint mark: values first, then the gate opens
            env.provenance.record(
                call.session_id,
                data,
                tool=spec.name,
                step=call.step,
                trusted=not spec.untrusted_output,
                now=now,
            )
        if spec.untrusted_output:
            env.counters.incr(taint_key(call.session_id), now=now, ttl=policy.session_ttl)
            call.untrusted_text = tuple(_texts(data))
        return result


def _backoff(base: float, cap: float, attempt: int, jitter: bool) -> float:
    delay = min(cap, base * 2 ** (attempt - 1))
    return random.uniform(0, delay) if jitter else delay


def _texts(data: Any) -> list[str]:
    """Every string of a JSON result, keys included: outside text can hide in either."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [text for key, value in data.items() for text in (key, *_texts(value))]
    if isinstance(data, list):
        return [text for value in data for text in _texts(value)]
    return []
