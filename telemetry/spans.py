"""From a finished ``Call`` to span records: the span contract in code, with no OpenTelemetry import.

One call becomes one parent span (``execute_tool {tool}``) and one child span per stage that ran
(``guard.<stage>``), retries as events on the execute stage span. Every value that could carry data
passes through the ``Masker`` here, before it becomes an attribute. Both exporters (the OTLP JSON trail
and spans through an OpenTelemetry tracer) are fed from these records, so they cannot disagree.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from guard.call import Call
from guard.codes import Code, ReasonCode
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import Masker, detect_injection

__all__ = [
    "AttributeValue",
    "EventRecord",
    "SpanRecord",
    "build_call_spans",
]

AttributeValue: TypeAlias = str | bool | int | float | list[str]
"""The attribute value types the contract uses."""

KIND_INTERNAL = 1
"""OTLP ``SPAN_KIND_INTERNAL``."""
STATUS_UNSET = 0
STATUS_ERROR = 2

_PENDING_CODES = frozenset({Code.CONFIRMATION_REQUIRED, Code.TAINTED_CONTEXT})


@dataclass(slots=True, kw_only=True)
class EventRecord:
    """A timestamped event on a span (a retry)."""

    name: str
    time_ns: int
    attributes: list[tuple[str, AttributeValue]]


@dataclass(slots=True, kw_only=True)
class SpanRecord:
    """One span, ready to encode or replay through a tracer. Ids are lowercase hex."""

    trace_id: str
    span_id: str
    parent_span_id: str
    """Empty for a root span."""
    name: str
    start_ns: int
    end_ns: int
    attributes: Sequence[tuple[str, AttributeValue]]
    kind: int = KIND_INTERNAL
    status_code: int = STATUS_UNSET
    status_message: str = ""
    events: list[EventRecord] = field(default_factory=list)


def _masked_arguments(call: Call, masker: Masker) -> str | None:
    """The arguments as the span shows them: validated if possible, else whatever arrived, masked."""
    sensitive = call.spec.sensitive_fields if call.spec is not None else frozenset()
    if call.canonical is not None:
        if not sensitive and not masker.needs_scan(call.canonical):
            return masker.cap(call.canonical)
        return masker.json(json.loads(call.canonical), sensitive)
    if call.parsed is not None:
        return masker.json(call.parsed, sensitive)
    if call.raw_arguments is not None:
        if sensitive:  # text that is not JSON: the field names still say where secrets are
            try:
                return masker.json(json.loads(call.raw_arguments), sensitive)
            except ValueError:
                pass
        return masker.text(call.raw_arguments)
    return None


_BYTE_HEX = [format(index, "02x") for index in range(256)]


def new_ids(stages: int) -> tuple[str, list[str]]:
    """A random trace id, and span ids that share a random 56-bit prefix and differ in the last byte.

    Ids need only be unique within their trace; one ``urandom`` per call keeps this cheap.
    """
    raw = os.urandom(23).hex()
    if stages >= 255:  # pragma: no cover - no pipeline has that many stages
        more = os.urandom(8 * (stages + 1)).hex()
        return raw[:32], [more[16 * index : 16 * index + 16] for index in range(stages + 1)]
    prefix = raw[32:46]
    return raw[:32], [prefix + _BYTE_HEX[index + 1] for index in range(stages + 1)]


def build_call_spans(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
) -> list[SpanRecord]:
    """The call span first, then one span per stage, in the order the stages ran.

    ``parent`` is ``(trace_id, span_id)`` in hex of the host's span that was current when the call
    ended, so the call joins the agent's trace; otherwise the call span starts a trace of its own.
    """
    chain, marks = call.chain, call.marks
    ran = max(len(marks) - 1, 0)  # stage i ran from marks[i] to marks[i + 1]
    trace_id, span_ids = new_ids(ran)
    if parent is not None:
        trace_id, parent_id = parent
    else:
        parent_id = ""
    call_span_id = span_ids[0]
    code = result.code
    attributes = call_attributes(call, result, masker, capture_content)
    end_ns = call.end_ns or (marks[-1] if marks else call.start_ns)
    spans = [
        SpanRecord(
            trace_id=trace_id,
            span_id=call_span_id,
            parent_span_id=parent_id,
            name=attr.CALL_SPAN_PREFIX + str(attributes[1][1]),
            start_ns=call.start_ns,
            end_ns=end_ns,
            attributes=attributes,
            status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
            status_message="" if result.ok else str(code),
        )
    ]
    last_outcome = "final" if result.ok else "reject"
    for index in range(ran):
        last = index == ran - 1
        name, shared, status_code, status_message = stage_shape(
            chain[index], last_outcome if last else "pass", code if last else None
        )
        record = SpanRecord(
            trace_id=trace_id,
            span_id=span_ids[index + 1],
            parent_span_id=call_span_id,
            name=name,
            start_ns=marks[index],
            end_ns=marks[index + 1],
            attributes=shared,
            status_code=status_code,
            status_message=status_message,
        )
        if call.retries and chain[index] == "execute":
            record.events = [
                EventRecord(
                    name=attr.RETRY_EVENT,
                    time_ns=retry.at_ns,
                    attributes=[
                        (attr.RETRY_ATTEMPT, retry.attempt),
                        (attr.RETRY_ERROR, retry.error),
                        (attr.RETRY_DELAY, float(retry.delay)),
                    ],
                )
                for retry in call.retries
            ]
        spans.append(record)
    return spans


_Shape: TypeAlias = tuple[str, tuple[tuple[str, AttributeValue], ...], int, str]
_shapes: dict[tuple[str, str, ReasonCode | None], _Shape] = {}


def stage_shape(name: str, outcome: str, code: ReasonCode | None) -> _Shape:
    """Name, attributes and status of a stage span: few distinct ones, so built once each.

    The attributes are a tuple shared between spans (and cached whole by the encoder).
    """
    key = (name, outcome, code)
    shape = _shapes.get(key)
    if shape is None:
        attributes: list[tuple[str, AttributeValue]] = [
            (attr.STAGE_NAME, name),
            (attr.STAGE_OUTCOME, outcome),
        ]
        if code is not None:
            attributes.append((attr.STAGE_CODE, str(code)))
        rejected = outcome == "reject"
        shape = (
            attr.STAGE_SPAN_PREFIX + name,
            tuple(attributes),
            STATUS_ERROR if rejected else STATUS_UNSET,
            str(code) if rejected and code is not None else "",
        )
        if len(_shapes) < 4096:
            _shapes[key] = shape
    return shape


def call_attributes(
    call: Call, result: ToolResult, masker: Masker, capture_content: bool
) -> list[tuple[str, AttributeValue]]:
    code = result.code
    spec = call.spec
    tool_name = call.tool if spec is not None and spec.name == call.tool else masker.text(call.tool)
    items: list[tuple[str, AttributeValue]] = [
        (attr.GEN_AI_OPERATION_NAME, attr.OPERATION_EXECUTE_TOOL),
        (attr.GEN_AI_TOOL_NAME, tool_name),
        (attr.GEN_AI_TOOL_TYPE, "function"),
        (attr.GEN_AI_CONVERSATION_ID, call.session_id),
        (attr.CODE, str(code)),
        (attr.OK, result.ok),
        (attr.FIXABLE, code.fixable),
        (attr.REPLAYED, result.replayed),
        (attr.CONFIRMED, call.confirmed),
        (attr.RESUMED, call.approval is not None),
        (attr.ATTEMPTS, call.attempts),
        (attr.OUTCOME, str(result.outcome)),
        (attr.STEP, call.step),
        (attr.TURN, call.turn),
        (attr.PRINCIPAL, masker.principal(call.principal.id)),
        (attr.ROLE, call.principal.role),
        (attr.MESSAGE, masker.text(result.message)),
    ]
    if call.call_id is not None:
        items.append((attr.GEN_AI_TOOL_CALL_ID, masker.text(call.call_id)))
    if not result.ok:
        items.append((attr.ERROR_TYPE, str(code)))
    rejected = call.rejected_stage
    if rejected is not None:
        items.append((attr.REJECTED_STAGE, rejected))
    if spec is not None:
        items += [
            (attr.EFFECT, str(spec.effect)),
            (attr.RISK, str(spec.risk)),
            (attr.TOOL_VERSION, spec.version),
            (attr.SCHEMA_HASH, spec.schema_hash),
            (attr.UNTRUSTED, spec.untrusted_output),
        ]
    approval_id = result.approval_id or (call.approval.id if call.approval is not None else None)
    if approval_id is not None:
        items.append((attr.APPROVAL_ID, approval_id))
        if call.approval is not None and call.decision is not None:
            items.append((attr.APPROVAL_OUTCOME, call.decision))
            if call.approval.decided_by is not None:
                items.append((attr.APPROVER, masker.principal(call.approval.decided_by)))
        elif code in _PENDING_CODES:
            items.append((attr.APPROVAL_OUTCOME, "pending"))
    key = result.idempotency_key or call.idempotency_key
    if key is not None:
        items.append((attr.IDEMPOTENCY_KEY_HASH, masker.short_hash(key)))
    arguments = _masked_arguments(call, masker)
    if arguments is not None:
        items.append((attr.ARGUMENTS, arguments))
        if capture_content:
            items.append((attr.GEN_AI_TOOL_CALL_ARGUMENTS, arguments))
    if call.problems:
        items.append((attr.INVALID_FIELDS, [masker.text(problem.path) for problem in call.problems]))
    if call.untrusted_text:
        rule = detect_injection(call.untrusted_text)
        items.append((attr.INJECTION_DETECTED, rule is not None))
        if rule is not None:
            items.append((attr.INJECTION_RULE, rule))
    if capture_content:
        data: Any = call.result_data if call.result_data is not None else result.data
        if data is not None:
            items.append((attr.GEN_AI_TOOL_CALL_RESULT, masker.json(data)))
    return items
