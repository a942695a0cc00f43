"""The one OTLP JSON encoder: span records to lines, as the OpenTelemetry Collector writes them.

One line is one ``ExportTraceServiceRequest``; trace and span ids as lowercase hex; ``kind`` and
status ``code`` as integers; 64-bit integers (times, ``intValue``) as decimal strings; doubles as
``repr`` (non-finite ones as proto3's ``"NaN"``/``"Infinity"`` strings); fields in field-number
order, as protobuf's JSON mapping writes them; scalar fields at their default (``0``, ``""``)
left out, except a span's ids and an attribute's key, while ``resource``, ``scope`` and ``status``
are always written (``{}`` when empty).

Everything that writes spans as OTLP JSON comes here: the trail (``encode_spans`` of
``telemetry.spans.encode_call`` text), the sidecar (``telemetry.sidecar.wire`` reads the received
bytes and asks for each fragment: ``span_head``, ``span_tail``, ``encode_attribute``, ``join_*``;
anything unusual goes through ``telemetry.sidecar.proto`` records and ``encode_request``), the
benchmarks and ``analytics.synth``'s fixtures. Fragments that repeat (codes, flags, stage spans'
text) are cached, bounded.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from telemetry import attributes as attr
from telemetry.records import (
    KIND_INTERNAL,
    AttributeValue,
    EventRecord,
    KeyValueList,
    LinkRecord,
    ResourceGroup,
    ScopeGroup,
    Shape,
    SpanRecord,
    encodable,
    encodable_attributes,
    shape_of,
)

__all__ = [
    "encode_attribute",
    "encode_attribute_groups",
    "encode_attributes",
    "encode_request",
    "encode_shaped",
    "encode_span",
    "encode_spans",
    "frame_spans",
    "join_request",
    "join_resource",
    "join_scope",
    "join_span",
    "resource_head",
    "scope_head",
    "span_head",
    "span_later",
    "span_tail",
    "span_trace_state",
]

_escape = encode_basestring
_CACHE_LIMIT = 8192
_cache: dict[tuple[str, Any], str] = {}
_tuples: dict[tuple[tuple[str, Any], ...], str] = {}
_prefixes: dict[str, str] = {}


def _value(value: Any) -> str:
    """An OTLP ``AnyValue``: the contract's types, and arrays, key-value lists, bytes and empty."""
    if value is True:
        return '{"boolValue":true}'
    if value is False:
        return '{"boolValue":false}'
    if isinstance(value, str):
        return '{"stringValue":' + _escape(value) + "}"
    if isinstance(value, int):
        return '{"intValue":"' + str(value) + '"}'
    if isinstance(value, float):
        return '{"doubleValue":' + _double(value) + "}"
    if isinstance(value, KeyValueList):
        pairs = ",".join(_attribute(key, item) for key, item in value)
        return '{"kvlistValue":{' + ('"values":[' + pairs + "]" if pairs else "") + "}}"
    if isinstance(value, list | tuple):
        values = ",".join(_value(item) for item in value)
        return '{"arrayValue":{' + ('"values":[' + values + "]" if values else "") + "}}"
    if isinstance(value, dict):
        pairs = ",".join(_attribute(key, item) for key, item in value.items())
        return '{"kvlistValue":{' + ('"values":[' + pairs + "]" if pairs else "") + "}}"
    if isinstance(value, bytes):
        return '{"bytesValue":"' + base64.b64encode(value).decode("ascii") + '"}'
    return "{}"  # an AnyValue with nothing set


def _double(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):  # JSON has no NaN: proto3 strings
        return '"NaN"' if value != value else ('"Infinity"' if value > 0 else '"-Infinity"')
    return json.dumps(value)


def _attribute(key: str, value: Any) -> str:
    return '{"key":' + _escape(key) + ',"value":' + _value(value) + "}"


def encode_attribute(key: str, value: Any) -> str:
    """One ``{"key":...,"value":{...}}``: what ``encode_attributes`` writes for that pair."""
    return _attribute(key, value)


_LOW_CARDINALITY = frozenset(
    {
        attr.GEN_AI_OPERATION_NAME, attr.GEN_AI_TOOL_NAME, attr.GEN_AI_TOOL_TYPE, attr.ERROR_TYPE,
        attr.CODE, attr.OK, attr.FIXABLE, attr.REJECTED_STAGE, attr.REPLAYED, attr.CONFIRMED,
        attr.RESUMED, attr.APPROVAL_OUTCOME, attr.ATTEMPTS, attr.OUTCOME, attr.EFFECT, attr.RISK,
        attr.STEP, attr.TURN, attr.TOOL_VERSION, attr.SCHEMA_HASH, attr.ROLE, attr.UNTRUSTED,
        attr.INJECTION_DETECTED, attr.INJECTION_RULE, attr.STAGE_NAME, attr.STAGE_OUTCOME,
        attr.PRINCIPAL, attr.GEN_AI_CONVERSATION_ID, attr.CODE_STAGE,
    }
)  # fmt: skip
"""Keys whose values repeat: their encoded fragments are cached (bounded)."""


def encode_attributes(attributes: Sequence[tuple[str, AttributeValue]]) -> str:
    """``[{"key":...,"value":{...}}, ...]`` for a sequence of attribute pairs.

    Fragments of values that repeat (codes, stages, tools, flags, steps) are cached; a tuple of
    pairs is cached whole, which is how stage spans share their attributes.
    """
    if isinstance(attributes, tuple):
        whole = _tuples.get(attributes)
        if whole is not None:
            return whole
    cache = _cache
    low = _LOW_CARDINALITY
    out = []
    for key, value in attributes:
        if key in low and value.__class__ is not list:
            pair = (key, value)
            fragment = cache.get(pair)
            if fragment is None:
                fragment = _attribute(key, value)
                if len(cache) < _CACHE_LIMIT:
                    cache[pair] = fragment
        else:
            prefix = _prefixes.get(key)
            if prefix is None:
                prefix = _prefixes.setdefault(key, '{"key":' + _escape(key) + ',"value":')
            if value.__class__ is str:
                fragment = prefix + '{"stringValue":' + _escape(value) + "}}"
            else:
                fragment = prefix + _value(value) + "}"
        out.append(fragment)
    encoded = "[" + ",".join(out) + "]"
    if isinstance(attributes, tuple) and len(_tuples) < _CACHE_LIMIT:
        _tuples[attributes] = encoded
    return encoded


_groups: dict[tuple[tuple[str, Any], ...], str] = {}


def encode_attribute_groups(groups: Iterable[Sequence[tuple[str, AttributeValue]]]) -> str:
    """``encode_attributes`` of the groups' pairs, in order, as one list.

    A group that is a tuple holds values that repeat together (a tool's effect, risk and
    version; a call's code and flags): its text is cached whole, bounded, so such a group costs one
    lookup. A list is encoded pair by pair.
    """
    out = []
    for group in groups:
        if group.__class__ is tuple:
            text = _groups.get(group)
            if text is None:
                text = encode_attributes(list(group))[1:-1]
                if len(_groups) < _CACHE_LIMIT:
                    _groups[group] = text
        else:
            text = encode_attributes(group)[1:-1]
        if text:
            out.append(text)
    return "[" + ",".join(out) + "]"


_shape_text: dict[int, tuple[Shape, tuple[str, str]]] = {}
"""id of a stage shape's attribute tuple -> (the shape, its text around ids and times). The entry
holds the shape, so the id cannot be reused while it is cached."""


def _shaped_parts(span: SpanRecord) -> tuple[str, str] | None:
    """The cached text of a span that is a stage shape's, unchanged; None for any other span."""
    attributes = span.attributes
    entry = _shape_text.get(id(attributes))
    if entry is None:
        shape = shape_of(attributes)
        if shape is None:
            return None
        bare = SpanRecord(
            trace_id="", span_id="", parent_span_id="", name=shape[0], start_ns=0, end_ns=0,
            attributes=shape[1], status_code=shape[2], status_message=shape[3],
        )  # fmt: skip
        entry = (shape, _parts(bare))
        _shape_text[id(attributes)] = entry
    shape = entry[0]
    if (
        shape[1] is attributes
        and shape[0] == span.name
        and shape[2] == span.status_code
        and shape[3] == span.status_message
        and span.kind == KIND_INTERNAL
        and not (
            span.events or span.links or span.trace_state or span.flags
            or span.dropped_attributes_count or span.dropped_events_count or span.dropped_links_count
        )
    ):  # fmt: skip
        return entry[1]
    return None


# A span's text, in field-number order (what protobuf's JSON mapping writes):
#   {"traceId", "spanId", traceState, parentSpanId | head: name, kind | times |
#    tail: attributes, then later: droppedAttributesCount, events, droppedEventsCount, links,
#    droppedLinksCount, status, flags}
# Each piece is a function below, so a reader that caches text by its input's bytes
# (``telemetry.sidecar.wire``) asks this module for every piece and writes no JSON of its own.


def span_head(name: str, kind: int) -> str:
    """``,"name":...,"kind":N``: a span's fields between its ids and its times (each if set)."""
    text = ',"name":' + _escape(name) if name else ""
    return text + ',"kind":' + str(kind) if kind else text


def span_trace_state(trace_state: str) -> str:
    """``,"traceState":...`` (or nothing): between a span's ``spanId`` and ``parentSpanId``."""
    return ',"traceState":' + _escape(trace_state) if trace_state else ""


def span_tail(attributes: Sequence[str], later: str) -> str:
    """A span's text after its times: its attributes (``encode_attribute`` texts), then ``later``."""
    if attributes:
        return ',"attributes":[' + ",".join(attributes) + "]" + later
    return later


def span_later(span: SpanRecord) -> str:
    """A span's fields after its attributes, closing brace included (``status`` always)."""
    text = ""
    if span.dropped_attributes_count:
        text += ',"droppedAttributesCount":' + str(span.dropped_attributes_count)
    if span.events:
        text += ',"events":[' + ",".join(_event(event) for event in span.events) + "]"
    if span.dropped_events_count:
        text += ',"droppedEventsCount":' + str(span.dropped_events_count)
    if span.links:
        text += ',"links":[' + ",".join(_link(link) for link in span.links) + "]"
    if span.dropped_links_count:
        text += ',"droppedLinksCount":' + str(span.dropped_links_count)
    message, code = span.status_message, span.status_code
    status = [] if not message else ['"message":' + _escape(message)]
    if code:
        status.append('"code":' + str(code))
    text += ',"status":{' + ",".join(status) + "}"
    return text + ',"flags":' + str(span.flags) + "}" if span.flags else text + "}"


def _event(event: EventRecord) -> str:
    parts = []
    if event.time_ns:
        parts.append('"timeUnixNano":"' + str(event.time_ns) + '"')
    if event.name:
        parts.append('"name":' + _escape(event.name))
    if event.attributes:
        parts.append('"attributes":' + encode_attributes(event.attributes))
    if event.dropped_attributes_count:
        parts.append('"droppedAttributesCount":' + str(event.dropped_attributes_count))
    return "{" + ",".join(parts) + "}"


def _link(link: LinkRecord) -> str:
    parts = []
    if link.trace_id:
        parts.append('"traceId":"' + link.trace_id + '"')
    if link.span_id:
        parts.append('"spanId":"' + link.span_id + '"')
    if link.trace_state:
        parts.append('"traceState":' + _escape(link.trace_state))
    if link.attributes:
        parts.append('"attributes":' + encode_attributes(link.attributes))
    if link.dropped_attributes_count:
        parts.append('"droppedAttributesCount":' + str(link.dropped_attributes_count))
    if link.flags:
        parts.append('"flags":' + str(link.flags))
    return "{" + ",".join(parts) + "}"


def _parts(span: SpanRecord) -> tuple[str, str]:
    """The text of a span between its ids and its times, and after its times."""
    attributes = span.attributes
    tail = span_later(span)
    if attributes:
        tail = ',"attributes":' + encode_attributes(attributes) + tail
    return span_head(span.name, span.kind), tail


def join_span(
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    head: str,
    start_ns: int,
    end_ns: int,
    tail: str,
    trace_state: str = "",
) -> str:
    """A span's text from its ids (hex), ``span_head``, times, ``span_tail`` and ``span_trace_state``.

    Times of zero (unset) are left out, as is an empty parent (a root span).
    """
    if start_ns and end_ns:  # the usual span: one string built at once
        if parent_span_id:
            return (
                f'{{"traceId":"{trace_id}","spanId":"{span_id}"{trace_state},"parentSpanId":"'
                f'{parent_span_id}"{head},"startTimeUnixNano":"{start_ns}","endTimeUnixNano":"'
                f'{end_ns}"{tail}'
            )
        return (
            f'{{"traceId":"{trace_id}","spanId":"{span_id}"{trace_state}{head},"startTimeUnixNano'
            f'":"{start_ns}","endTimeUnixNano":"{end_ns}"{tail}'
        )
    text = '{"traceId":"' + trace_id + '","spanId":"' + span_id + '"' + trace_state
    if parent_span_id:
        text += ',"parentSpanId":"' + parent_span_id + '"'
    text += head
    if start_ns:
        text += ',"startTimeUnixNano":"' + str(start_ns) + '"'
    if end_ns:
        text += ',"endTimeUnixNano":"' + str(end_ns) + '"'
    return text + tail


def encode_span(span: SpanRecord) -> str:
    """One span as an OTLP JSON object.

    Spans that share their shape (stage spans: a shared attribute tuple, no events) reuse the text
    around their ids and times.
    """
    head, tail = _shaped_parts(span) or _parts(span)
    state = span_trace_state(span.trace_state) if span.trace_state else ""
    return join_span(
        span.trace_id,
        span.span_id,
        span.parent_span_id,
        head,
        span.start_ns,
        span.end_ns,
        tail,
        state,
    )


def encode_shaped(
    trace_id: str, span_id: str, parent_span_id: str, shape: Shape, start_ns: int, end_ns: int
) -> str:
    """``encode_span`` of the stage span with that shape (``stage_shape``), without the record:
    the same text, from the shape's cached text (a test holds the two equal)."""
    entry = _shape_text.get(id(shape[1]))
    if entry is None or entry[0] is not shape:
        record = SpanRecord(
            trace_id=trace_id, span_id=span_id, parent_span_id=parent_span_id, name=shape[0],
            start_ns=start_ns, end_ns=end_ns, attributes=shape[1], status_code=shape[2],
            status_message=shape[3],
        )  # fmt: skip
        return encode_span(record)
    head, tail = entry[1]
    return join_span(trace_id, span_id, parent_span_id, head, start_ns, end_ns, tail)


# Groups: a resource and its scopes. ``resource_head``/``scope_head`` depend on the group alone (a
# reader caches them by the group's bytes); ``join_*`` put the lists inside.


def resource_head(resource: ResourceGroup) -> str:
    """``{"resource":{...}``: the start of a ``ResourceSpans`` (``resource`` always written)."""
    inner = []
    if resource.attributes:
        inner.append('"attributes":' + encode_attributes(resource.attributes))
    if resource.dropped_attributes_count:
        inner.append('"droppedAttributesCount":' + str(resource.dropped_attributes_count))
    return '{"resource":{' + ",".join(inner) + "}"


def scope_head(scope: ScopeGroup) -> str:
    """``{"scope":{...}``: the start of a ``ScopeSpans`` (``scope`` always written)."""
    inner = []
    if scope.name:
        inner.append('"name":' + _escape(scope.name))
    if scope.version:
        inner.append('"version":' + _escape(scope.version))
    if scope.attributes:
        inner.append('"attributes":' + encode_attributes(scope.attributes))
    if scope.dropped_attributes_count:
        inner.append('"droppedAttributesCount":' + str(scope.dropped_attributes_count))
    return '{"scope":{' + ",".join(inner) + "}"


def join_scope(head: str, spans: Sequence[str], schema_url: str = "") -> str:
    """A ``ScopeSpans`` from ``scope_head`` and its spans' texts."""
    text = head + ',"spans":[' + ",".join(spans) + "]" if spans else head
    return text + ',"schemaUrl":' + _escape(schema_url) + "}" if schema_url else text + "}"


def join_resource(head: str, scopes: Sequence[str], schema_url: str = "") -> str:
    """A ``ResourceSpans`` from ``resource_head`` and its ``join_scope`` texts."""
    text = head + ',"scopeSpans":[' + ",".join(scopes) + "]" if scopes else head
    return text + ',"schemaUrl":' + _escape(schema_url) + "}" if schema_url else text + "}"


def join_request(resources: Sequence[str]) -> str:
    """One OTLP JSON line (without the newline) from ``join_resource`` texts."""
    return '{"resourceSpans":[' + ",".join(resources) + "]}"


def encode_request(resources: Iterable[ResourceGroup]) -> str:
    """One OTLP JSON line (without the newline) of any number of resources and scopes.

    A scope's spans are records, or text ``encode_span`` already made.
    """
    return join_request(
        [
            join_resource(
                resource_head(resource),
                [
                    join_scope(
                        scope_head(scope),
                        [s if isinstance(s, str) else encode_span(s) for s in scope.spans],
                        scope.schema_url,
                    )
                    for scope in resource.scopes
                ],
                resource.schema_url,
            )
            for resource in resources
        ]
    )


def encode_spans(
    spans: Iterable[SpanRecord | str],
    *,
    resource: Mapping[str, AttributeValue],
    scope_name: str,
    scope_version: str = "",
) -> str:
    """One OTLP JSON line (without the newline): all ``spans`` under one resource and one scope.

    ``spans`` are records, or text ``encode_span`` already made (joined by commas).
    """
    body = [span if isinstance(span, str) else encode_span(span) for span in spans]
    if not body:
        scope = ScopeGroup(name=encodable(scope_name), version=encodable(scope_version))
        group = ResourceGroup(attributes=_encodable_pairs(resource))
        return join_request(
            [join_resource(resource_head(group), [join_scope(scope_head(scope), [])])]
        )
    head, tail = frame_spans(resource=resource, scope_name=scope_name, scope_version=scope_version)
    return head + ",".join(body) + tail


def _encodable_pairs(resource: Mapping[str, AttributeValue]) -> list[tuple[str, AttributeValue]]:
    pairs = list(resource.items())
    encodable_attributes(pairs)
    return pairs


def frame_spans(
    *, resource: Mapping[str, AttributeValue], scope_name: str, scope_version: str = ""
) -> tuple[str, str]:
    """The text ``encode_spans`` writes before and after its (non-empty) comma-joined spans.

    A writer whose resource and scope do not change (the trail) makes it once and builds each
    line as ``head`` + spans + ``tail``: one join of the spans' texts, no copy per level.
    """
    scope = ScopeGroup(name=encodable(scope_name), version=encodable(scope_version))
    group = ResourceGroup(attributes=_encodable_pairs(resource))
    head = resource_head(group) + ',"scopeSpans":[' + scope_head(scope) + ',"spans":['
    return '{"resourceSpans":[' + head, "]}]}]}"
