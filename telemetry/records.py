"""Span records and their one OTLP JSON encoder. Imports nothing but the standard library and the contract.

A ``SpanRecord`` is one span, ready to encode or to replay through a tracer. Everything that writes
spans as OTLP JSON goes through ``encode_span``/``encode_spans`` here: the local trail (records built
from a guard ``Call`` by ``telemetry.spans``), the sidecar (``encode_request_line`` for text it
received), the benchmarks and the synthetic fixtures (``analytics.synth`` builds records too).

The encoding is the OpenTelemetry Collector file exporter's: one line is one
``ExportTraceServiceRequest``; trace and span ids as lowercase hex; ``kind`` and status ``code`` as
integers; 64-bit integers (times, ``intValue``) as decimal strings; empty fields left out.

Every string is made encodable first (``encodable``): UTF-8 cannot carry a lone surrogate
(``"\\ud800"``, which a model can send as a JSON escape), so such characters are replaced by U+FFFD and
the span says so (``guard.text_replaced``), rather than failing the whole line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from typing import Any, TypeAlias

from telemetry import attributes as attr

__all__ = [
    "KIND_INTERNAL",
    "STATUS_ERROR",
    "STATUS_UNSET",
    "AttributeValue",
    "EventRecord",
    "SpanRecord",
    "encodable",
    "encodable_attributes",
    "encode_attributes",
    "encode_span",
    "encode_spans",
    "new_ids",
    "stage_record",
]

AttributeValue: TypeAlias = str | bool | int | float | list[str]
"""The attribute value types the contract uses."""

KIND_INTERNAL = 1
"""OTLP ``SPAN_KIND_INTERNAL``."""
STATUS_UNSET = 0
STATUS_ERROR = 2


@dataclass(slots=True, kw_only=True)
class EventRecord:
    """A timestamped event on a span (a retry)."""

    name: str
    time_ns: int
    attributes: Sequence[tuple[str, AttributeValue]]


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


# encodable text

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate (which UTF-8 cannot carry) replaced by U+FFFD."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def encodable_attributes(
    attributes: list[tuple[str, AttributeValue]],
) -> bool:
    """Make every string in ``attributes`` encodable, in place; True when anything was replaced."""
    replaced = False
    for index, (key, value) in enumerate(attributes):
        if value.__class__ is str:
            text: str = value
            if not text.isascii() and _SURROGATE.search(text):
                attributes[index] = (key, _SURROGATE.sub("\ufffd", text))
                replaced = True
        elif isinstance(value, list) and any(
            not item.isascii() and _SURROGATE.search(item) for item in value
        ):
            attributes[index] = (key, [encodable(item) for item in value])
            replaced = True
    return replaced


# ids

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


# stage spans: few distinct shapes, built once each

_Shape: TypeAlias = tuple[str, tuple[tuple[str, AttributeValue], ...], int, str]
_shapes: dict[tuple[str, str, str | None, bool | None], _Shape] = {}


def stage_shape(name: str, outcome: str, code: str | None, fixable: bool | None = None) -> _Shape:
    """Name, attributes and status of a stage span: few distinct ones, so built once each.

    ``code`` is the code the stage ended the call with (its last stage); ``fixable`` goes on a
    rejecting stage span. The attributes are a tuple shared between spans (and cached by the encoder).
    """
    key = (name, outcome, code, fixable)
    shape = _shapes.get(key)
    if shape is None:
        attributes: list[tuple[str, AttributeValue]] = [
            (attr.STAGE_NAME, name),
            (attr.STAGE_OUTCOME, outcome),
        ]
        if code is not None:
            attributes.append((attr.STAGE_CODE, str(code)))
        rejected = outcome == "reject"
        if rejected and fixable is not None:
            attributes.append((attr.STAGE_FIXABLE, fixable))
        encodable_attributes(attributes)
        shape = (
            attr.STAGE_SPAN_PREFIX + encodable(name),
            tuple(attributes),
            STATUS_ERROR if rejected else STATUS_UNSET,
            encodable(str(code)) if rejected and code is not None else "",
        )
        if len(_shapes) < 4096:
            _shapes[key] = shape
    return shape


def stage_record(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    stage: str,
    outcome: str,
    code: str | None,
    fixable: bool | None,
    start_ns: int,
    end_ns: int,
) -> SpanRecord:
    """The record of one stage span."""
    name, attributes, status_code, status_message = stage_shape(stage, outcome, code, fixable)
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
        status_code=status_code,
        status_message=status_message,
    )


# the encoder

_escape = encode_basestring
_CACHE_LIMIT = 8192
_cache: dict[tuple[str, Any], str] = {}
_tuples: dict[tuple[tuple[str, Any], ...], str] = {}
_prefixes: dict[str, str] = {}


def _value(value: AttributeValue) -> str:
    if value is True:
        return '{"boolValue":true}'
    if value is False:
        return '{"boolValue":false}'
    if isinstance(value, str):
        return '{"stringValue":' + _escape(value) + "}"
    if isinstance(value, int):
        return '{"intValue":"' + str(value) + '"}'
    if isinstance(value, float):
        return '{"doubleValue":' + json.dumps(value) + "}"
    values = ",".join('{"stringValue":' + _escape(item) + "}" for item in value)
    return '{"arrayValue":{"values":[' + values + "]}}"


def _attribute(key: str, value: AttributeValue) -> str:
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


_tails: dict[tuple[str, tuple[tuple[str, Any], ...], str, int], tuple[str, str]] = {}


def _parts(span: SpanRecord) -> tuple[str, str]:
    """The text of a span before its start time and after its end time, ids aside."""
    name = '","name":' + _escape(span.name) + ',"kind":' + str(span.kind) + ',"startTimeUnixNano":"'
    tail = '"'
    if span.attributes:
        tail += ',"attributes":' + encode_attributes(span.attributes)
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
    if span.status_code:
        if span.status_message:
            tail += f',"status":{{"message":{_escape(span.status_message)},"code":{span.status_code}}}}}'
        else:
            tail += f',"status":{{"code":{span.status_code}}}}}'
    else:
        tail += ',"status":{}}'
    return name, tail


def encode_span(span: SpanRecord) -> str:
    """One span as an OTLP JSON object.

    Spans that share their shape (stage spans: a shared attribute tuple, no events) reuse the text
    around their ids and times.
    """
    attributes = span.attributes
    if attributes.__class__ is tuple and not span.events:
        key = (span.name, attributes, span.status_message, span.status_code)
        try:
            parts = _tails.get(key)
        except TypeError:  # a list value: not hashable, not shared
            parts = _parts(span)
        else:
            if parts is None:
                parts = _parts(span)
                if len(_tails) < _CACHE_LIMIT:
                    _tails[key] = parts
    else:
        parts = _parts(span)
    before, after = parts
    parent = span.parent_span_id
    return (
        '{"traceId":"' + span.trace_id + '","spanId":"' + span.span_id
        + ('","parentSpanId":"' + parent if parent else "")
        + before + str(span.start_ns) + '","endTimeUnixNano":"' + str(span.end_ns) + after
    )  # fmt: skip


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
