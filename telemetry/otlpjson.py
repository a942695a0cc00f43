"""OTLP JSON, exactly as the OpenTelemetry Collector's file exporter writes it.

One line is one ``ExportTraceServiceRequest`` in the OTLP/JSON mapping: ``resourceSpans`` ->
``scopeSpans`` -> ``spans``; trace and span ids as lowercase hex (not base64); ``kind`` and status
``code`` as integers; 64-bit integers (times, ``intValue``) as decimal strings; empty fields left out.

``encode_spans`` is the fast path the trail writer uses (string templates, no intermediate dicts);
``request_to_json`` and ``parse_request`` convert between that text and the protobuf messages, for
the sidecar receiver and for tests and loaders that want to check a line against the schema.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from guard.call import Call
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import Masker
from telemetry.spans import (
    STATUS_ERROR,
    STATUS_UNSET,
    AttributeValue,
    SpanRecord,
    build_call_spans,
    call_attributes,
    new_ids,
    stage_shape,
)

__all__ = [
    "encode_attributes",
    "encode_call",
    "encode_spans",
    "parse_request",
    "request_to_json",
]

_escape = encode_basestring
_CACHE_LIMIT = 8192
_cache: dict[tuple[str, Any], str] = {}
_tuples: dict[tuple[tuple[str, Any], ...], str] = {}


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
        attr.PRINCIPAL, attr.GEN_AI_CONVERSATION_ID,
    }
)  # fmt: skip
"""Keys whose values repeat: their encoded fragments are cached (bounded)."""
_prefixes: dict[str, str] = {}


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
        if key in low:
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


def _span(span: SpanRecord) -> str:
    head = (
        f'{{"traceId":"{span.trace_id}","spanId":"{span.span_id}"'
        + (f',"parentSpanId":"{span.parent_span_id}"' if span.parent_span_id else "")
        + f',"name":{_escape(span.name)},"kind":{span.kind}'
        f',"startTimeUnixNano":"{span.start_ns}","endTimeUnixNano":"{span.end_ns}"'
    )
    if span.attributes:
        head += ',"attributes":' + encode_attributes(span.attributes)
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
        head += ',"events":[' + events + "]"
    if span.status_code:
        if span.status_message:
            return (
                head
                + f',"status":{{"message":{_escape(span.status_message)},"code":{span.status_code}}}}}'
            )
        return head + f',"status":{{"code":{span.status_code}}}}}'
    return head + ',"status":{}}'


def encode_spans(
    spans: Iterable[SpanRecord | str],
    *,
    resource: Mapping[str, AttributeValue],
    scope_name: str,
    scope_version: str = "",
) -> str:
    """One OTLP JSON line (without the newline): all ``spans`` under one resource and one scope.

    ``spans`` are records, or text that ``encode_call`` already made.
    """
    scope = '{"name":' + _escape(scope_name)
    if scope_version:
        scope += ',"version":' + _escape(scope_version)
    scope += "}"
    body = ",".join([span if isinstance(span, str) else _span(span) for span in spans])
    return (
        '{"resourceSpans":[{"resource":{"attributes":'
        + encode_attributes(list(resource.items()))
        + '},"scopeSpans":[{"scope":'
        + scope
        + ',"spans":['
        + body
        + "]}]}]}"
    )


_stage_parts: dict[tuple[str, str, Any], tuple[str, str]] = {}


def _stage_part(name: str, outcome: str, code: Any) -> tuple[str, str]:
    """The constant text of a stage span, before and after its times (few distinct ones: cached)."""
    key = (name, outcome, code)
    parts = _stage_parts.get(key)
    if parts is None:
        span_name, attributes, status_code, status_message = stage_shape(name, outcome, code)
        head = '","name":' + _escape(span_name) + ',"kind":1,"startTimeUnixNano":"'
        tail = '","attributes":' + encode_attributes(attributes)
        if status_code:
            status = '"code":' + str(status_code)
            if status_message:
                status = '"message":' + _escape(status_message) + "," + status
            tail += ',"status":{' + status + "}}"
        else:
            tail += ',"status":{}}'
        parts = (head, tail)
        if len(_stage_parts) < 4096:
            _stage_parts[key] = parts
    return parts


def encode_call(
    call: Call,
    result: ToolResult,
    masker: Masker,
    *,
    capture_content: bool = False,
    parent: tuple[str, str] | None = None,
) -> str:
    """The spans of one finished call as OTLP JSON span objects, comma-separated.

    The same text ``_span`` would make of ``build_call_spans(...)`` (a test holds them equal), without
    the intermediate records: stage spans are cached text around their ids and times. This is the
    trail's hot path; ``encode_spans`` wraps the result of one or more calls into a line.
    """
    if call.retries:  # events are rare: the general path handles them
        return ",".join([_span(span) for span in build_call_spans(
            call, result, masker, capture_content=capture_content, parent=parent
        )])  # fmt: skip
    chain, marks = call.chain, call.marks
    ran = max(len(marks) - 1, 0)
    trace_id, span_ids = new_ids(ran)
    parent_id = ""
    if parent is not None:
        trace_id, parent_id = parent
    call_span_id = span_ids[0]
    attributes = call_attributes(call, result, masker, capture_content)
    end_ns = call.end_ns or (marks[-1] if marks else call.start_ns)
    head = SpanRecord(
        trace_id=trace_id,
        span_id=call_span_id,
        parent_span_id=parent_id,
        name=attr.CALL_SPAN_PREFIX + str(attributes[1][1]),
        start_ns=call.start_ns,
        end_ns=end_ns,
        attributes=attributes,
        status_code=STATUS_UNSET if result.ok else STATUS_ERROR,
        status_message="" if result.ok else str(result.code),
    )
    parts = [_span(head)]
    prefix = '{"traceId":"' + trace_id + '","spanId":"'
    middle = '","parentSpanId":"' + call_span_id
    last_outcome = "final" if result.ok else "reject"
    for index in range(ran):
        last = index == ran - 1
        before, after = _stage_part(
            chain[index], last_outcome if last else "pass", result.code if last else None
        )
        parts.append(
            prefix + span_ids[index + 1] + middle + before + str(marks[index])
            + '","endTimeUnixNano":"' + str(marks[index + 1]) + after
        )  # fmt: skip
    return ",".join(parts)


_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def _ids_to(data: Any, convert: Any) -> Any:
    """Rewrite every id field of an OTLP JSON structure with ``convert``."""
    if isinstance(data, dict):
        return {
            key: convert(value) if key in _ID_FIELDS and isinstance(value, str) else _ids_to(value, convert)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [_ids_to(item, convert) for item in data]
    return data


def _hex_to_base64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def _base64_to_hex(value: str) -> str:
    return base64.b64decode(value).hex()


def parse_request(text: str | bytes) -> ExportTraceServiceRequest:
    """An OTLP JSON line (hex ids) as the protobuf message; raises ``ValueError`` when malformed.

    Unknown fields are errors: this is the check that a line is what the OTLP schema says.
    """
    try:
        data = json.loads(text)
        data = _ids_to(data, _hex_to_base64)
        request = ExportTraceServiceRequest()
        json_format.ParseDict(data, request, ignore_unknown_fields=False)
        return request
    except (json_format.ParseError, TypeError, AttributeError) as error:
        raise ValueError(f"not an OTLP JSON trace request: {error}") from error


def request_to_json(request: ExportTraceServiceRequest) -> str:
    """The message as one OTLP JSON line (hex ids, integer enums, int64 as strings)."""
    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    data = _ids_to(data, _base64_to_hex)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)
