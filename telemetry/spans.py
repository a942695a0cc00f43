"""From a finished ``Call`` to span records: the span contract in code, with no OpenTelemetry import.

One call becomes one parent span (``execute_tool {tool}``) and one child span per stage that ran
(``guard.<stage>``), retries as events on the execute stage span. Every value that could carry data
passes through the ``Masker`` here, before it becomes an attribute, and every string is made
encodable (``telemetry.records.encodable``). All exporters (the OTLP JSON trail, spans through an
OpenTelemetry tracer) are fed from these records, through one encoder (``telemetry.records``).
"""

from __future__ import annotations

import json
from typing import Any

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import Masker, detect_injection
from telemetry.records import (
    STATUS_ERROR,
    STATUS_UNSET,
    AttributeValue,
    EventRecord,
    SpanRecord,
    encodable,
    encodable_attributes,
    encode_span,
    new_ids,
    stage_record,
)

__all__ = [
    "AttributeValue",
    "EventRecord",
    "SpanRecord",
    "build_call_spans",
    "call_attributes",
    "encode_call",
]

_PENDING_CODES = frozenset({Code.CONFIRMATION_REQUIRED, Code.TAINTED_CONTEXT})


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
        return masker.raw_json(call.raw_arguments, sensitive)
    return None


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
    tool_name, attributes = call_attributes(call, result, masker, capture_content)
    end_ns = call.end_ns or (marks[-1] if marks else call.start_ns)
    code_text = str(code)
    spans = [
        SpanRecord(
            trace_id=trace_id,
            span_id=call_span_id,
            parent_span_id=parent_id,
            name=attr.CALL_SPAN_PREFIX + tool_name,
            start_ns=call.start_ns,
            end_ns=end_ns,
            attributes=attributes,
            status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
            status_message="" if result.ok else code_text,
        )
    ]
    last_outcome = "final" if result.ok else "reject"
    fixable = result_fixable(result)
    shadow_stage = call.shadow_stage if call.shadow is not None else None
    for index in range(ran):
        last = index == ran - 1
        stage = chain[index]
        shadowed = stage == shadow_stage and not last  # would have rejected; the call went on
        record = stage_record(
            trace_id=trace_id,
            span_id=span_ids[index + 1],
            parent_span_id=call_span_id,
            stage=stage,
            outcome=last_outcome if last else "pass",
            code=code_text if last else str(call.shadow) if shadowed else None,
            fixable=fixable if last else None,
            start_ns=marks[index],
            end_ns=marks[index + 1],
        )
        if call.retries and chain[index] == "execute":
            record.events = [
                EventRecord(
                    name=attr.RETRY_EVENT,
                    time_ns=retry.at_ns,
                    attributes=[
                        (attr.RETRY_ATTEMPT, retry.attempt),
                        (attr.RETRY_ERROR, encodable(retry.error)),
                        (attr.RETRY_DELAY, float(retry.delay)),
                    ],
                )
                for retry in call.retries
            ]
        spans.append(record)
    return spans


def encode_call(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
) -> str:
    """The spans of one finished call as OTLP JSON span objects, comma-separated.

    ``build_call_spans`` through ``telemetry.records.encode_span``; ``encode_spans`` wraps the
    result of one or more calls into a line.
    """
    records = build_call_spans(call, result, masker, capture_content=capture_content, parent=parent)
    return ",".join([encode_span(record) for record in records])


def _fixable(code: Any) -> bool:
    return bool(getattr(code, "fixable", False))


def result_fixable(result: ToolResult) -> bool:
    """The result's own verdict (a check may decide per refusal), else its code's flag."""
    fixable = getattr(result, "fixable", None)
    return _fixable(result.code) if fixable is None else bool(fixable)


def _code_stage(code: Any) -> str | None:
    stage = getattr(code, "stage", None)
    return stage if isinstance(stage, str) else None


def call_attributes(
    call: Call, result: ToolResult, masker: Masker, capture_content: bool
) -> tuple[str, list[tuple[str, AttributeValue]]]:
    """The (encodable) tool name as the span name shows it, and the call span's attributes."""
    code = result.code
    fixable = result_fixable(result)
    shadow = getattr(call, "shadow", None)
    if shadow is not None:  # shadow mode: guard.code says what the gate would have decided
        code, fixable = shadow, bool(call.shadow_fixable)
    spec = call.spec
    tool_name = call.tool if spec is not None and spec.name == call.tool else masker.text(call.tool)
    items: list[tuple[str, AttributeValue]] = [
        (attr.GEN_AI_OPERATION_NAME, attr.OPERATION_EXECUTE_TOOL),
        (attr.GEN_AI_TOOL_NAME, tool_name),
        (attr.GEN_AI_TOOL_TYPE, "function"),
        (attr.GEN_AI_CONVERSATION_ID, masker.identifier(call.session_id)),
        (attr.CODE, str(code)),
        (attr.OK, result.ok),
        (attr.FIXABLE, fixable),
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
    stage = _code_stage(code)
    if stage is not None:
        items.append((attr.CODE_STAGE, stage))
    if call.call_id is not None:
        items.append((attr.GEN_AI_TOOL_CALL_ID, masker.text(call.call_id)))
    if not result.ok:
        items.append((attr.ERROR_TYPE, str(result.code)))
    rejected = call.rejected_stage if shadow is None else call.shadow_stage
    if rejected is not None:
        items.append((attr.REJECTED_STAGE, rejected))
    if shadow is not None:
        items += [(attr.SHADOW, True), (attr.SHADOW_CODE, str(shadow))]
    warnings = getattr(result, "warnings", ())
    if warnings:
        items += [
            (attr.WARNINGS, len(warnings)),
            (attr.WARNING_CODES, [str(warning.code) for warning in warnings]),
        ]
    previous = getattr(call, "previous_principal", None)
    if previous is not None:
        items.append((attr.PRINCIPAL_PREVIOUS, masker.principal(previous.id)))
    if previous is not None or not getattr(call.principal, "authenticated", True):
        items.append((attr.AUTHENTICATED, bool(getattr(call.principal, "authenticated", True))))
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
        items.append(
            (attr.INVALID_FIELDS, [masker.text(problem.path) for problem in call.problems])
        )
    if call.untrusted_text:
        rule = detect_injection(call.untrusted_text)
        items.append((attr.INJECTION_DETECTED, rule is not None))
        if rule is not None:
            items.append((attr.INJECTION_RULE, rule))
    if capture_content:
        data: Any = call.result_data if call.result_data is not None else result.data
        if data is not None:
            items.append((attr.GEN_AI_TOOL_CALL_RESULT, masker.json(data)))
    if encodable_attributes(items):
        items.append((attr.TEXT_REPLACED, True))
        tool_name = encodable(tool_name)
    return tool_name, items
