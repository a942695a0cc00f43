"""What a ``tools/call`` answers downstream: the upstream's result unchanged, the verdict beside it.

A call the guard let through answers with the upstream's own result (``tools.passed_result``):
its ``content`` blocks (annotations, images, embedded resources as they came), its
``structuredContent`` (which still matches the upstream's ``outputSchema``), its ``isError`` and
its ``_meta``. A replay answers with the stored upstream result, unchanged. An upstream error
result is relayed as the error it is (``isError: true``, the upstream's content).

The guard's verdict always travels in ``_meta["callgate"]`` (``VERDICT_KEY``), never instead of
the result: ``code``, ``ok``, ``message``, ``replayed``, ``outcome``, ``warnings``, ``trace_id``
(the W3C trace the call's spans belong to, when known), ``upstream`` (whether ``content`` and
``structuredContent`` are the upstream's), ``approval_id`` when the call is held or
refused under an approval, ``idempotency_key`` when a write's outcome is unknown, and for a
refusal its ``data`` (problems, the tools available).

A call that has no upstream result (refused, or held for a human) answers ``isError: true`` with
one text block, the guard's payload as JSON (message, code, approval id, problems), and that payload
as ``structuredContent`` only when the tool is listed without an ``outputSchema``: a client that
validates against the upstream's schema never sees a foreign shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from pydantic import ValidationError

from guard import Code, ToolResult
from guard.providers._wire import result_payload

__all__ = [
    "VERDICT_KEY",
    "caller_context",
    "guard_answer",
    "passed_answer",
    "render",
    "trace_id_now",
    "upstream_result",
    "verdict",
]

VERDICT_KEY = "callgate"
"""The ``_meta`` key of the guard's verdict on every ``tools/call`` result."""

_PROPAGATOR = TraceContextTextMapPropagator()


def caller_context(meta: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The client's trace from a request's ``_meta.traceparent`` (W3C), to parent the call's spans
    under; None when it sent none (or an invalid one)."""
    parent = (meta or {}).get("traceparent")
    if not isinstance(parent, str):
        return None
    carrier = {"traceparent": parent}
    state = (meta or {}).get("tracestate")
    if isinstance(state, str):
        carrier["tracestate"] = state
    extracted = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


def trace_id_now() -> str | None:
    """The trace id of the span current now (the client's, or the host's), as 32 hex digits."""
    span = trace.get_current_span(otel_context.get_current()).get_span_context()
    return trace.format_trace_id(span.trace_id) if span.is_valid else None


def upstream_result(result: ToolResult) -> dict[str, Any] | None:
    """The upstream's result this guard result carries (a call let through, a replay of one, or
    the upstream's own error result); None for a result only the guard wrote."""
    data = result.data
    if data is None or not isinstance(data.get("content"), list):
        return None
    if not result.ok and result.code is not Code.UPSTREAM_REJECTED:
        return None
    if not result.ok and data.get("isError") is not True:
        return None
    return data


def verdict(result: ToolResult, *, trace_id: str | None, passed: bool) -> dict[str, Any]:
    """The guard's verdict as JSON values; ``passed`` leaves out ``data``, the upstream's result."""
    payload = result_payload(result)
    if passed:
        payload.pop("data", None)
    payload["replayed"] = result.replayed
    payload["outcome"] = str(result.outcome)
    payload.setdefault("warnings", [])
    payload["trace_id"] = trace_id
    payload["upstream"] = passed
    return payload


def passed_answer(result: ToolResult, *, trace_id: str | None) -> dict[str, Any] | None:
    """The upstream's result this guard result carries, the verdict in its ``_meta``, as wire
    JSON; None when the guard wrote the answer itself (``guard_answer``)."""
    passed = upstream_result(result)
    if passed is None:
        return None
    meta = passed.get("_meta")
    return {
        **passed,
        "_meta": {
            **(meta if isinstance(meta, dict) else {}),
            VERDICT_KEY: verdict(result, trace_id=trace_id, passed=True),
        },
    }


def guard_answer(result: ToolResult, *, structured: bool, trace_id: str | None) -> dict[str, Any]:
    """The answer of a call with no upstream result (refused, held), as wire JSON."""
    said = verdict(result, trace_id=trace_id, passed=False)
    payload = result_payload(result)
    answer: dict[str, Any] = {
        "content": [{"type": "text", "text": json.dumps(payload, ensure_ascii=False)}],
        "isError": not result.ok,
        "_meta": {VERDICT_KEY: said},
    }
    if structured:
        answer["structuredContent"] = payload
    return answer


def render(
    result: ToolResult, *, structured: bool, trace_id: str | None = None
) -> types.CallToolResult:
    """``result`` as the ``tools/call`` answer described above; ``structured`` is False when the
    tool is listed with an ``outputSchema`` (a guard payload there would be a foreign shape)."""
    if trace_id is None:
        trace_id = trace_id_now()
    passed = passed_answer(result, trace_id=trace_id)
    if passed is not None:
        try:
            return types.CallToolResult.model_validate(passed)
        except ValidationError:  # a result stored in another shape (an older gateway): the guard's
            pass
    answer = guard_answer(result, structured=structured, trace_id=trace_id)
    return types.CallToolResult.model_validate(answer)
