"""The one OTLP JSON encoder: span records to lines, as the OpenTelemetry Collector writes them.

One line is one ``ExportTraceServiceRequest``; trace and span ids as lowercase hex; ``kind`` and
status ``code`` as integers; 64-bit integers (times, ``intValue``) as decimal strings; empty fields
left out. Everything that writes spans as OTLP JSON comes here: the trail (``encode_spans`` of
``telemetry.spans.encode_call`` text), the sidecar (``encode_request`` via
``telemetry.otlpjson.request_to_line``), the benchmarks and ``analytics.synth``'s fixtures.
Fragments that repeat (codes, flags, stage spans' text) are cached, bounded.
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
    KeyValueList,
    LinkRecord,
    ResourceGroup,
    Shape,
    SpanRecord,
    encodable,
    encodable_attributes,
    shape_of,
)

__all__ = [
    "encode_attributes",
    "encode_request",
    "encode_shaped",
    "encode_span",
    "encode_spans",
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


def _parts(span: SpanRecord) -> tuple[str, str]:
    """The text of a span before its start time and after its end time, ids aside."""
    name = '"'
    if span.trace_state:
        name += ',"traceState":' + _escape(span.trace_state)
    name += ',"name":' + _escape(span.name)
    if span.flags:
        name += ',"flags":' + str(span.flags)
    name += (',"kind":' + str(span.kind) if span.kind else "") + ',"startTimeUnixNano":"'
    tail = '"'
    if span.attributes:
        tail += ',"attributes":' + encode_attributes(span.attributes)
    if span.dropped_attributes_count:
        tail += ',"droppedAttributesCount":' + str(span.dropped_attributes_count)
    if span.events:
        events = ",".join(
            '{"timeUnixNano":"'
            + str(event.time_ns)
            + '","name":'
            + _escape(event.name)
            + (',"attributes":' + encode_attributes(event.attributes) if event.attributes else "")
            + "}"
            for event in span.events
        )
        tail += ',"events":[' + events + "]"
    if span.dropped_events_count:
        tail += ',"droppedEventsCount":' + str(span.dropped_events_count)
    if span.links:
        tail += ',"links":[' + ",".join(_link(link) for link in span.links) + "]"
    if span.dropped_links_count:
        tail += ',"droppedLinksCount":' + str(span.dropped_links_count)
    status = []
    if span.status_message:
        status.append('"message":' + _escape(span.status_message))
    if span.status_code:
        status.append('"code":' + str(span.status_code))
    tail += ',"status":{' + ",".join(status) + "}}"
    return name, tail


def _link(link: LinkRecord) -> str:
    text = '{"traceId":"' + link.trace_id + '","spanId":"' + link.span_id + '"'
    if link.trace_state:
        text += ',"traceState":' + _escape(link.trace_state)
    if link.attributes:
        text += ',"attributes":' + encode_attributes(link.attributes)
    if link.dropped_attributes_count:
        text += ',"droppedAttributesCount":' + str(link.dropped_attributes_count)
    if link.flags:
        text += ',"flags":' + str(link.flags)
    return text + "}"


def encode_span(span: SpanRecord) -> str:
    """One span as an OTLP JSON object.

    Spans that share their shape (stage spans: a shared attribute tuple, no events) reuse the text
    around their ids and times.
    """
    parts = _shaped_parts(span) or _parts(span)
    return _assemble(span.trace_id, span.span_id, span.parent_span_id, parts, span.start_ns, span.end_ns)


def _assemble(
    trace_id: str, span_id: str, parent: str, parts: tuple[str, str], start_ns: int, end_ns: int
) -> str:
    before, after = parts
    return (
        '{"traceId":"' + trace_id + '","spanId":"' + span_id
        + ('","parentSpanId":"' + parent if parent else "")
        + before + str(start_ns) + '","endTimeUnixNano":"' + str(end_ns) + after
    )  # fmt: skip


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
    return _assemble(trace_id, span_id, parent_span_id, entry[1], start_ns, end_ns)


def encode_request(resources: Iterable[ResourceGroup]) -> str:
    """One OTLP JSON line (without the newline) of any number of resources and scopes."""
    out = []
    for resource in resources:
        text = '{"resource":{'
        inner = []
        if resource.attributes:
            inner.append('"attributes":' + encode_attributes(resource.attributes))
        if resource.dropped_attributes_count:
            inner.append('"droppedAttributesCount":' + str(resource.dropped_attributes_count))
        text += ",".join(inner) + "}"
        scopes = []
        for scope in resource.scopes:
            head = []
            if scope.name:
                head.append('"name":' + _escape(scope.name))
            if scope.version:
                head.append('"version":' + _escape(scope.version))
            if scope.attributes:
                head.append('"attributes":' + encode_attributes(scope.attributes))
            if scope.dropped_attributes_count:
                head.append('"droppedAttributesCount":' + str(scope.dropped_attributes_count))
            body = ",".join([s if isinstance(s, str) else encode_span(s) for s in scope.spans])
            group = '{"scope":{' + ",".join(head) + "}"
            if body:
                group += ',"spans":[' + body + "]"
            if scope.schema_url:
                group += ',"schemaUrl":' + _escape(scope.schema_url)
            scopes.append(group + "}")
        if scopes:
            text += ',"scopeSpans":[' + ",".join(scopes) + "]"
        if resource.schema_url:
            text += ',"schemaUrl":' + _escape(resource.schema_url)
        out.append(text + "}")
    return '{"resourceSpans":[' + ",".join(out) + "]}"


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
    scope = '{"name":' + _escape(encodable(scope_name))
    if scope_version:
        scope += ',"version":' + _escape(encodable(scope_version))
    scope += "}"
    body = ",".join([span if isinstance(span, str) else encode_span(span) for span in spans])
    pairs = list(resource.items())
    encodable_attributes(pairs)
    return (
        '{"resourceSpans":[{"resource":{"attributes":'
        + encode_attributes(pairs)
        + '},"scopeSpans":[{"scope":'
        + scope
        + ',"spans":['
        + body
        + "]}]}]}"
    )
