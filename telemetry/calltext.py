"""A finished call as OTLP JSON text, for the trail: the text ``encode_span`` makes of
``telemetry.spans.build_call_spans``'s records, built from templates instead of records.

The calls that take the same path (the stages that ran, how the last one ended) have stage spans
that differ only in ids and times: one ``StagesTemplate`` per path writes them all. A plain call
(no approval, idempotency key, provenance, warnings, invalid fields, untrusted text, shadow mode
or captured content: reads, and most refusals) has a call span whose attributes repeat but for its
step, turn, message, call id and arguments: one ``CallTemplate`` per tool, session, principal
and outcome writes it. Any other call is written from its attribute groups
(``call_attribute_groups``); a test holds every path's text equal to the records' encoding.
The trail writes the same text as UTF-8 bytes (``telemetry.calltrail``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring
from typing import Any

from guard.call import Call
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.encoder import (
    _parts,
    _shaped_parts,
    encode_attribute,
    encode_attribute_groups,
    encode_shaped,
    encode_span,
    join_span,
    span_head,
    span_later,
)
from telemetry.masking import Masker
from telemetry.records import (
    KIND_INTERNAL,
    SPAN_ID_SUFFIXES,
    STATUS_ERROR,
    STATUS_UNSET,
    CallIds,
    Shape,
    SpanRecord,
    given_prefix,
    new_id_prefix,
)
from telemetry.spans import (
    _head,
    _layout,
    _masked_arguments,
    _path,
    _settlement,
    _shapes_of,
    call_attribute_groups,
    masked_message,
    span_count,
)

__all__ = ["CallTemplate", "StagesTemplate", "encode_call"]

_CACHE_LIMIT = 4096


def _format(pieces: Sequence[str]) -> str:
    """A ``%`` format of literal ``pieces`` with a ``%s`` hole between each two."""
    return "%s".join(piece.replace("%", "%%") for piece in pieces)


def _utf8_format(
    pieces: Sequence[str], holes: Sequence[int], number: Callable[[int], bool]
) -> bytes:
    """A bytes ``%`` format of literal ``pieces`` (UTF-8) with a hole for each of ``holes`` between
    them: ``%d`` where ``number(hole)`` (integers formatted in place), else ``%s`` (bytes)."""
    text = bytearray(pieces[0].encode().replace(b"%", b"%%"))
    for hole, piece in zip(holes, pieces[1:], strict=True):
        text += b"%d" if number(hole) else b"%s"
        text += piece.encode().replace(b"%", b"%%")
    return bytes(text)


class StagesTemplate:
    """The text of one call's stage spans, comma-separated, with a hole for each id and time.

    Stage ``i`` has the shape ``shapes[i]`` and the span id ``prefix + hexes[i + 1]``, under the
    call span ``prefix + hexes[0]``, and runs from ``marks[i]`` to ``marks[i + 1]``: ``render`` is
    the text ``encode_shaped`` writes for each (a test holds them equal; marks must be non-zero).
    Calls that take the same path share their stages' shapes, so one template serves them all and
    a call's stage spans cost one ``%`` of its ids and times. ``pieces`` and ``holes`` are its
    literal text and which value fills each hole between them: 0 the trace id, 1 the prefix,
    ``2 + i`` mark ``i``.
    """

    __slots__ = ("_pick", "_text", "_utf8", "holes", "pieces")

    def __init__(self, shapes: Sequence[Shape], hexes: Sequence[str]) -> None:
        pieces = [""]
        holes: list[int] = []
        for index, shape in enumerate(shapes):
            shaped = SpanRecord(
                trace_id="", span_id="", parent_span_id="", name=shape[0], start_ns=0, end_ns=0,
                attributes=shape[1], status_code=shape[2], status_message=shape[3],
            )  # fmt: skip
            head, tail = _shaped_parts(shaped) or _parts(shaped)
            pieces[-1] += ("," if index else "") + '{"traceId":"'
            pieces += [
                '","spanId":"', hexes[index + 1] + '","parentSpanId":"',
                hexes[0] + '"' + head + ',"startTimeUnixNano":"', '","endTimeUnixNano":"',
                '"' + tail,
            ]  # fmt: skip
            holes += (0, 1, 1, 2 + index, 3 + index)
        self.pieces: tuple[str, ...] = tuple(pieces)
        self.holes: tuple[int, ...] = tuple(holes)
        self._text = _format(pieces)
        self._utf8 = _utf8_format(pieces, holes, lambda hole: hole >= 2)
        self._pick = operator.itemgetter(*holes) if len(holes) > 1 else None

    def render(self, trace_id: str, prefix: str, marks: Sequence[int]) -> str:
        """The stage spans of a call with these ids and stage boundaries (one more than stages)."""
        if self._pick is None:
            return ""
        text: str = self._text % self._pick((trace_id, prefix, *map(str, marks)))
        return text

    def render_utf8(self, trace_id: str, prefix: str, marks: Sequence[int]) -> bytes:
        """``render`` as UTF-8, the marks formatted in place (a bytes ``%`` is the faster)."""
        if self._pick is None:
            return b""
        data: bytes = self._utf8 % self._pick((trace_id.encode(), prefix.encode(), *marks))
        return data


_templates: dict[tuple[Any, ...], StagesTemplate] = {}
"""A call's path (``_path``) -> the template of its stage spans, bounded."""


def _stage_template(path: tuple[Any, ...]) -> StagesTemplate:
    template = _templates.get(path)
    if template is None:
        template = StagesTemplate(_shapes_of(path), SPAN_ID_SUFFIXES)
        if len(_templates) < 4096:
            _templates[path] = template
    return template


_HOLES = {
    attr.STEP: 5,
    attr.TURN: 6,
    attr.MESSAGE: 7,
    attr.GEN_AI_TOOL_CALL_ID: 8,
    attr.ARGUMENTS: 9,
}
"""The call span's attributes that vary between plain calls of one template, and which value
fills each: 0-4 are the trace id, span-id prefix, parent span id, start and end."""
_INT_HOLES = frozenset({3, 4, 5, 6})
"""The values that are integers (the times, step and turn); the rest are text."""


class CallTemplate:
    """The text of a plain call's span with a hole for each id, time and varying attribute.

    Made from one call's attributes (``call_attribute_groups``, in their order); ``render`` of
    another call with the same template key is the text the general path writes for it.
    ``pieces`` and ``holes`` are its literal text and the value (``_HOLES``' numbering) that
    fills each hole between them.
    """

    __slots__ = ("_pick", "_text", "holes", "pieces", "spec")

    def __init__(
        self,
        spec: object,
        name: str,
        pairs: Sequence[tuple[str, Any]],
        status: SpanRecord,
        parented: bool,
    ) -> None:
        self.spec = spec
        """The tool spec the key names by id (held, so the id cannot be reused)."""
        pieces = ['{"traceId":"', '","spanId":"', SPAN_ID_SUFFIXES[0] + '"']
        holes = [0, 1]
        if parented:
            pieces[-1] += ',"parentSpanId":"'
            pieces.append('"')
            holes.append(2)
        pieces[-1] += span_head(name, KIND_INTERNAL) + ',"startTimeUnixNano":"'
        pieces += ['","endTimeUnixNano":"', '","attributes":[']
        holes += [3, 4]
        for index, (key, value) in enumerate(pairs):
            comma = "," if index else ""
            hole = _HOLES.get(key)
            if hole is None:
                pieces[-1] += comma + encode_attribute(key, value)
                continue
            number = hole in (5, 6)
            if value.__class__ is not (int if number else str):
                raise TypeError(f"{key} holds a {type(value).__name__}: no template")
            kind = "intValue" if number else "stringValue"
            pieces[-1] += comma + '{"key":' + encode_basestring(key) + ',"value":{"' + kind + '":'
            pieces[-1] += '"' if number else ""
            pieces.append(('"' if number else "") + "}}")
            holes.append(hole)
        pieces[-1] += "]" + span_later(status)
        self.pieces: tuple[str, ...] = tuple(pieces)
        self.holes: tuple[int, ...] = tuple(holes)
        self._text = _format(pieces)
        self._pick = operator.itemgetter(*holes)

    def render(self, values: Sequence[str]) -> str:
        """The call span, from its values in ``_HOLES``' numbering."""
        text: str = self._text % self._pick(values)
        return text


_calls: dict[tuple[Any, ...], CallTemplate] = {}
"""A plain call's template key -> its call span's template (cleared when full)."""


def _is_plain(call: Call, result: ToolResult) -> bool:
    """Whether the call span holds only the attributes a ``CallTemplate`` writes."""
    principal = call.principal
    return (
        getattr(call, "shadow", None) is None
        and not getattr(result, "warnings", ())
        and getattr(call, "previous_principal", None) is None
        and getattr(principal, "authenticated", True) is True
        and result.approval_id is None
        and call.approval is None
        and call.provenance is None
        and result.idempotency_key is None
        and call.idempotency_key is None
        and not call.problems
        and not call.untrusted_text
        and call.spec is not None
    )


def _plain_head_text(
    call: Call,
    result: ToolResult,
    masker: Masker,
    parent: tuple[str, str] | None,
    given: tuple[str, str] | None,
) -> tuple[str, str, str] | None:
    """Trace id, span-id prefix and text of a plain call's span, from its template; None when
    the call is not plain (or has an unset time)."""
    marks = call.marks
    end = call.end_ns or (marks[-1] if marks else call.start_ns)
    if not (call.start_ns and end) or not _is_plain(call, result):
        return None
    spec = call.spec
    arguments = _masked_arguments(call, masker)
    key = _plain_key(call, result, masker, parent is None, arguments is None)
    template = _calls.get(key)
    if template is None or template.spec is not spec:
        template = _call_template(call, result, masker, parent is not None)
        if template is None:
            return None
        if len(_calls) >= _CACHE_LIMIT:
            _calls.clear()
        _calls[key] = template
    trace_id, prefix = given if given is not None else new_id_prefix()
    parent_id = ""
    if parent is not None:
        trace_id, parent_id = parent
    call_id = call.call_id
    values = (
        trace_id, prefix, parent_id, str(call.start_ns), str(end), str(call.step), str(call.turn),
        _message_text(masker, result.message),
        "" if call_id is None else encode_basestring(masker.text(call_id)),
        "" if arguments is None else encode_basestring(arguments),
    )  # fmt: skip
    return trace_id, prefix, template.render(values)


def _plain_key(
    call: Call, result: ToolResult, masker: Masker, root: bool, no_arguments: bool
) -> tuple[Any, ...]:
    """What decides a plain call span's template: all it holds but the values in ``_HOLES``."""
    principal = call.principal
    return (
        masker, call.tool, id(call.spec), call.session_id, principal.id, principal.role,
        result.code, result.ok, getattr(result, "fixable", None), result.replayed,
        call.confirmed, call.attempts, result.outcome, call.turns_marked, call.rejected_stage,
        call.risk, root, call.call_id is None, no_arguments,
    )  # fmt: skip


def _message_text(masker: Masker, message: str) -> str:
    """The message masked (``masked_message``), as a JSON string."""
    return encode_basestring(masked_message(masker, message))


def _call_template(
    call: Call, result: ToolResult, masker: Masker, parented: bool
) -> CallTemplate | None:
    tool_name, groups = call_attribute_groups(call, result, masker, False)
    status = SpanRecord(
        trace_id="", span_id="", parent_span_id="", name="", start_ns=0, end_ns=0,
        attributes=(), status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
        status_message="" if result.ok else str(result.code),
    )  # fmt: skip
    pairs = [pair for group in groups for pair in group]
    try:
        return CallTemplate(call.spec, attr.CALL_SPAN_PREFIX + tool_name, pairs, status, parented)
    except TypeError:  # a varying attribute of an unexpected type: the general path
        return None


def encode_call(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
    check_text: bool = True,
    ids: CallIds | None = None,
) -> str:
    """The spans of one finished call as OTLP JSON span objects, comma-separated.

    The text ``encode_span`` makes of each of ``build_call_spans``'s records (a test holds them
    equal). Stage spans come from a template per path (the stages that ran and how the call
    ended: ``StagesTemplate``) in which only ids and times vary; a call with retries (events on
    its execute span), a settlement span or an unset time is written span by span. ``ids``
    (``new_ids``, drawn once for the call by an observer that shares them) name the spans, as
    they name the call's OTLP copy. ``encode_spans`` wraps calls into a line.
    """
    marks = call.marks
    if call.retries or call.settled is not None or len(marks) > len(SPAN_ID_SUFFIXES) or 0 in marks:
        return _encode_each(call, result, masker, capture_content, parent, check_text, ids)
    given = given_prefix(ids, span_count(call))
    plain = (
        None
        if check_text or capture_content
        else _plain_head_text(call, result, masker, parent, given)
    )
    if plain is not None:
        trace_id, prefix, text = plain
    elif check_text:
        head, prefix = _head(call, result, masker, capture_content, parent, check_text, given)
        trace_id, text = head.trace_id, encode_span(head)
    else:
        trace_id, prefix, text = _head_text(call, result, masker, capture_content, parent, given)
    if len(marks) < 2:
        return text
    return text + "," + _stage_template(_path(call, result)).render(trace_id, prefix, marks)


def _head_text(
    call: Call,
    result: ToolResult,
    masker: Masker,
    capture_content: bool,
    parent: tuple[str, str] | None,
    given: tuple[str, str] | None,
) -> tuple[str, str, str]:
    """Trace id, span-id prefix and text of the call span: ``encode_span`` of ``_head``'s record
    (with ``check_text`` off), its attributes encoded by groups."""
    marks = call.marks
    trace_id, prefix = given if given is not None else new_id_prefix()
    parent_id = ""
    if parent is not None:
        trace_id, parent_id = parent
    tool_name, groups = call_attribute_groups(call, result, masker, capture_content)
    status = SpanRecord(
        trace_id=trace_id, span_id="", parent_span_id="", name="", start_ns=0, end_ns=0,
        attributes=(), status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
        status_message="" if result.ok else str(result.code),
    )  # fmt: skip
    text = join_span(
        trace_id,
        prefix + SPAN_ID_SUFFIXES[0],
        parent_id,
        span_head(attr.CALL_SPAN_PREFIX + tool_name, KIND_INTERNAL),
        call.start_ns,
        call.end_ns or (marks[-1] if marks else call.start_ns),
        ',"attributes":' + encode_attribute_groups(groups) + span_later(status),
    )
    return trace_id, prefix, text


def _encode_each(
    call: Call,
    result: ToolResult,
    masker: Masker,
    capture_content: bool,
    parent: tuple[str, str] | None,
    check_text: bool,
    ids: CallIds | None,
) -> str:
    """``encode_call``, span by span (events, a settlement, unusual times)."""
    head, stages, settlement_id = _layout(
        call, result, masker, capture_content, parent, check_text, ids
    )
    trace_id, call_span_id = head.trace_id, head.span_id
    parts = [encode_span(head)]
    for span_id, shape, start, end, events in stages:
        if events:
            name, attributes, status_code, status_message = shape
            record = SpanRecord(
                trace_id=trace_id, span_id=span_id, parent_span_id=call_span_id, name=name,
                start_ns=start, end_ns=end, attributes=attributes, status_code=status_code,
                status_message=status_message, events=events,
            )  # fmt: skip
            parts.append(encode_span(record))
        else:
            parts.append(encode_shaped(trace_id, span_id, call_span_id, shape, start, end))
    if settlement_id is not None:
        parts.append(encode_span(_settlement(call, result, masker, head, settlement_id)))
    return ",".join(parts)
