"""From a finished ``Call`` to span records: the span contract in code, with no OpenTelemetry import.

One call becomes one parent span (``execute_tool {tool}``) and one child span per stage that ran
(``guard.<stage>``), retries as events on the execute stage span. Every value that could carry data
passes through the ``Masker`` here, before it becomes an attribute, and every string is made
encodable (``telemetry.records.encodable``). All exporters (the OTLP JSON trail, spans through an
OpenTelemetry tracer) are fed from these records, through one encoder (``telemetry.encoder``).
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

from guard.call import Call, stage_outcome
from guard.codes import HUMAN_GATES
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import EXCERPT_CONTEXT, InjectionMatch, Masker, find_injection
from telemetry.records import (
    SPAN_ID_SUFFIXES,
    STATUS_ERROR,
    STATUS_UNSET,
    AttributeValue,
    CallIds,
    EventRecord,
    Shape,
    SpanRecord,
    _shapes,
    encodable,
    encodable_attributes,
    given_prefix,
    new_id_prefix,
    stage_shape,
)
from telemetry.settlement import STATUS_CHECK, settlement_record

__all__ = [
    "AttributeValue",
    "EventRecord",
    "SpanRecord",
    "build_call_spans",
    "call_attributes",
    "masked_message",
    "span_count",
]


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


_messages: dict[tuple[Masker, object, str], str] = {}
"""(masker, its mode, a result's message) -> the message masked (cleared at 4,096): messages repeat (the
same refusal of the same field, ``get_order succeeded.``) and masking a long one that holds a
number runs every detector over it, which costs more than the rest of its call's spans."""


def masked_message(masker: Masker, message: str) -> str:
    """``masker.text(message)``, remembered per masker."""
    key = (masker, masker.mode, message)
    text = _messages.get(key)
    if text is None:
        text = masker.text(message)
        if len(_messages) >= 4096:
            _messages.clear()
        _messages[key] = text
    return text


_Stage: TypeAlias = tuple[str, Shape, int, int, list[EventRecord] | None]
"""A stage span in a call's layout: span id, shape, start, end, retry events (execute only)."""


def _head(
    call: Call,
    result: ToolResult,
    masker: Masker,
    capture_content: bool,
    parent: tuple[str, str] | None,
    check_text: bool,
    given: tuple[str, str] | None = None,
) -> tuple[SpanRecord, str]:
    """The call span's record, and the prefix its stage spans' ids share with its own: ``given``
    (``given_prefix`` of the call's ids) or fresh ones."""
    marks = call.marks
    trace_id, prefix = given if given is not None else new_id_prefix()
    parent_id = ""
    if parent is not None:
        trace_id, parent_id = parent
    code = result.code
    tool_name, attributes = call_attributes(call, result, masker, capture_content, check_text)
    head = SpanRecord(
        trace_id=trace_id,
        span_id=prefix + SPAN_ID_SUFFIXES[0],
        parent_span_id=parent_id,
        name=attr.CALL_SPAN_PREFIX + tool_name,
        start_ns=call.start_ns,
        end_ns=call.end_ns or (marks[-1] if marks else call.start_ns),
        attributes=attributes,
        status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
        status_message="" if result.ok else str(code),
    )
    return head, prefix


def _path(call: Call, result: ToolResult) -> tuple[Any, ...]:
    """What decides a call's stage shapes: the stages that ran, how the last ended, shadow mode."""
    shadow = call.shadow
    return (
        call.chain,
        len(call.marks) - 1,
        stage_outcome(result),
        str(result.code),
        result_fixable(result),
        None if shadow is None else call.shadow_stage,
        None if shadow is None else str(shadow),
    )


def _shapes_of(path: tuple[Any, ...]) -> list[Shape]:
    """The shape of each stage span of a call that took ``path`` (``_path``), in order."""
    chain, ran, last_outcome, code_text, fixable, shadow_stage, shadow_code = path
    shapes: list[Shape] = []
    for index in range(ran):
        last = index == ran - 1
        stage = chain[index]
        shadowed = stage == shadow_stage and not last  # would have rejected; the call went on
        code_of = code_text if last else shadow_code if shadowed else None
        key = (stage, last_outcome if last else "pass", code_of, fixable if last else None)
        shapes.append(_shapes.get(key) or stage_shape(*key))
    return shapes


def _layout(
    call: Call,
    result: ToolResult,
    masker: Masker,
    capture_content: bool,
    parent: tuple[str, str] | None,
    check_text: bool,
    ids: CallIds | None = None,
) -> tuple[SpanRecord, list[_Stage], str | None]:
    """The call span's record, its stage spans and the settlement span's id (None without one):
    the one place a call's spans are laid out. ``ids`` (``new_ids``, drawn once for the call)
    name the spans when they were drawn for as many spans as the call has."""
    given = given_prefix(ids, span_count(call))
    head, prefix = _head(call, result, masker, capture_content, parent, check_text, given)
    marks = call.marks
    stages: list[_Stage] = []
    for index, shape in enumerate(_shapes_of(_path(call, result))):
        events = None
        if call.retries and call.chain[index] == "execute":
            events = [
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
        span_id = prefix + SPAN_ID_SUFFIXES[index + 1]
        stages.append((span_id, shape, marks[index], marks[index + 1], events))
    settlement_id = prefix + SPAN_ID_SUFFIXES[len(stages) + 1] if call.settled is not None else None
    return head, stages, settlement_id


def span_count(call: Call) -> int:
    """How many spans a finished call makes: its call span, a span per stage that ran, and the
    ``guard.outcome.settled`` span when its status check settled an earlier unknown outcome."""
    return max(len(call.marks), 1) + (call.settled is not None)


def _settlement(call: Call, result: ToolResult, masker: Masker, head: SpanRecord,
                span_id: str) -> SpanRecord:  # fmt: skip
    """The settlement span of a call whose status check settled an unknown outcome: over the
    idempotency stage, where the check ran."""
    assert call.settled is not None
    marks, chain = call.marks, call.chain
    index = chain.index("idempotency") if "idempotency" in chain else -1
    start, end = (
        (marks[index], marks[index + 1]) if 0 <= index < len(marks) - 1
        else (head.start_ns, head.end_ns)
    )  # fmt: skip
    return settlement_record(
        masker,
        outcome=str(call.settled),
        key=result.idempotency_key or call.idempotency_key or "",
        tool=call.spec.name if call.spec is not None else call.tool,
        by=STATUS_CHECK,
        approval_id=result.approval_id,
        start_ns=start,
        end_ns=end,
        ids=(head.trace_id, span_id, head.span_id),
    )


def build_call_spans(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
    check_text: bool = True,
    ids: CallIds | None = None,
) -> list[SpanRecord]:
    """The call span first, then one span per stage, in the order the stages ran.

    ``parent`` is ``(trace_id, span_id)`` in hex of the host's span that was current when the call
    ended, so the call joins the agent's trace; otherwise the call span starts a trace of its own.
    ``check_text`` makes every string encodable (``guard.text_replaced`` says when it had to); the
    trail skips it and calls again with it only for a call whose text does not encode. ``ids``
    (``telemetry.records.new_ids``, drawn once for the call) names the spans; without them they
    are drawn here (the trace id is the parent's whenever there is one).
    """
    head, stages, settlement_id = _layout(
        call, result, masker, capture_content, parent, check_text, ids
    )
    records = [head]
    for span_id, (name, attributes, status_code, status_message), start, end, events in stages:
        records.append(
            SpanRecord(
                trace_id=head.trace_id,
                span_id=span_id,
                parent_span_id=head.span_id,
                name=name,
                start_ns=start,
                end_ns=end,
                attributes=attributes,
                status_code=status_code,
                status_message=status_message,
                events=events or (),
            )
        )
    if settlement_id is not None:
        records.append(_settlement(call, result, masker, head, settlement_id))
    return records


def _fixable(code: Any) -> bool:
    return bool(getattr(code, "fixable", False))


def result_fixable(result: ToolResult) -> bool:
    """The result's own verdict (a check may decide per refusal), else its code's flag."""
    fixable = getattr(result, "fixable", None)
    return _fixable(result.code) if fixable is None else bool(fixable)


def _code_stage(code: Any) -> str | None:
    stage = getattr(code, "stage", None)
    return stage if isinstance(stage, str) else None


_Group: TypeAlias = tuple[tuple[str, AttributeValue], ...] | list[tuple[str, AttributeValue]]
"""Consecutive attributes of a call span: a tuple when its values repeat together (its text is
cached whole: ``encode_attribute_groups``), a list when they vary from call to call."""
_TOOL_TYPE = (attr.GEN_AI_TOOL_TYPE, "function")
_OPERATION = (attr.GEN_AI_OPERATION_NAME, attr.OPERATION_EXECUTE_TOOL)


def call_attributes(
    call: Call, result: ToolResult, masker: Masker, capture_content: bool, check_text: bool = True
) -> tuple[str, list[tuple[str, AttributeValue]]]:
    """The (encodable) tool name as the span name shows it, and the call span's attributes."""
    tool_name, groups = call_attribute_groups(call, result, masker, capture_content)
    items = [pair for group in groups for pair in group]
    if check_text and encodable_attributes(items):
        items.append((attr.TEXT_REPLACED, True))
        tool_name = encodable(tool_name)
    return tool_name, items


def call_attribute_groups(
    call: Call, result: ToolResult, masker: Masker, capture_content: bool
) -> tuple[str, list[_Group]]:
    """The tool name as the span name shows it, and the call span's attributes in groups, in
    order (``call_attributes`` without the check that the text encodes)."""
    code = result.code
    fixable = result_fixable(result)
    shadow = getattr(call, "shadow", None)
    if shadow is not None:  # shadow mode: guard.code says what the gate would have decided
        code, fixable = shadow, bool(call.shadow_fixable)
    spec = call.spec
    tool_name = call.tool if spec is not None and spec.name == call.tool else masker.text(call.tool)
    groups: list[_Group] = [
        (_OPERATION, (attr.GEN_AI_TOOL_NAME, tool_name), _TOOL_TYPE),
        [(attr.GEN_AI_CONVERSATION_ID, masker.identifier(call.session_id))],
        (
            (attr.CODE, str(code)),
            (attr.OK, result.ok),
            (attr.FIXABLE, fixable),
            (attr.REPLAYED, result.replayed),
            (attr.CONFIRMED, call.confirmed),
            (attr.RESUMED, call.approval is not None),
            (attr.ATTEMPTS, call.attempts),
            (attr.OUTCOME, str(result.outcome)),
        ),
    ]
    items: list[tuple[str, AttributeValue]] = [
        (attr.STEP, call.step),
        (attr.TURN, call.turn),
        (attr.TURNS_MARKED, call.turns_marked),
        (attr.PRINCIPAL, masker.principal(call.principal.id)),
        (attr.ROLE, call.principal.role),
        (attr.MESSAGE, masked_message(masker, result.message)),
    ]
    groups.append(items)
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
        groups.append(
            (
                (attr.EFFECT, str(spec.effect)),
                (attr.RISK, str(spec.risk if call.risk is None else call.risk)),
                (attr.TOOL_VERSION, spec.version),
                (attr.SCHEMA_HASH, spec.schema_hash),
                (attr.UNTRUSTED, spec.untrusted_output),
            )
        )
        items = []
        groups.append(items)
    approval_id = result.approval_id or (call.approval.id if call.approval is not None else None)
    if approval_id is not None:
        items.append((attr.APPROVAL_ID, approval_id))
        if call.approval is not None and call.decision is not None:
            items.append((attr.APPROVAL_OUTCOME, call.decision))
            if call.approval.decided_by is not None:
                items.append((attr.APPROVER, masker.principal(call.approval.decided_by)))
            decided_at = call.approval.decided_at
            if decided_at is not None:
                items += [
                    (attr.APPROVAL_DECIDED_AT, float(decided_at)),
                    (attr.APPROVAL_WAIT_MS, (decided_at - call.approval.created_at) * 1000.0),
                ]
        elif result.needs_human:
            items.append((attr.APPROVAL_OUTCOME, "pending"))
        reason = call.approval.reason if call.approval is not None else code
        if reason in HUMAN_GATES:
            items.append((attr.APPROVAL_REASON, str(reason)))
    hit = call.provenance
    if hit is not None:
        sensitive = spec is not None and hit.field.split("/")[0] in spec.sensitive_fields
        masked = masker.short_hash(hit.value) if sensitive else masker.text(hit.value)
        items += [(attr.PROVENANCE_FIELD, hit.field), (attr.PROVENANCE_VALUE, masked)]
        if hit.source is not None and hit.source.tool is not None:
            items += [
                (attr.PROVENANCE_SOURCE_TOOL, hit.source.tool),
                (attr.PROVENANCE_SOURCE_STEP, hit.source.step),
            ]
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
        found = find_injection(call.untrusted_text)
        items.append((attr.INJECTION_DETECTED, found is not None))
        if found is not None:
            items.append((attr.INJECTION_RULE, found.rule))
            items.append((attr.INJECTION_EXCERPT, _excerpt(found, masker)))
    if capture_content:
        data: Any = call.result_data if call.result_data is not None else result.data
        if data is not None:
            items.append((attr.GEN_AI_TOOL_CALL_RESULT, masker.json(data)))
    return tool_name, groups


EXCERPT_LIMIT = 200
"""Characters of ``guard.injection.excerpt`` at most (docs/telemetry.md)."""


def _excerpt(found: InjectionMatch, masker: Masker) -> str:
    """The evidence a responder reads. A wide window around the match, cut at whitespace, is
    masked before the excerpt is cut from it: a value cut first (half a card number) could slip
    past the detectors, and the window keeps masking's cost and length cap out of the way. Only
    runs when a rule matched."""
    text, margin = found.text, 4 * EXCERPT_CONTEXT
    lo = max(found.start - margin, 0)
    while lo > 0 and not text[lo - 1].isspace():
        lo -= 1
    hi = min(found.end + margin, len(text))
    while hi < len(text) and not text[hi].isspace():
        hi += 1
    masked = ("…" if lo else "") + masker.text(text[lo:hi]) + ("…" if hi < len(text) else "")
    again = find_injection([masked])
    # When masking changed the matched words, show where the window starts.
    excerpt = again.excerpt() if again is not None else masked[:EXCERPT_LIMIT]
    return excerpt if len(excerpt) <= EXCERPT_LIMIT else excerpt[: EXCERPT_LIMIT - 1] + "…"
