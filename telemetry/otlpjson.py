"""OTLP JSON, exactly as the OpenTelemetry Collector's file exporter writes it.

One line is one ``ExportTraceServiceRequest`` in the OTLP/JSON mapping: ``resourceSpans`` ->
``scopeSpans`` -> ``spans``; trace and span ids as lowercase hex (not base64); ``kind`` and status
``code`` as integers; 64-bit integers (times, ``intValue``) as decimal strings; empty fields left out.

The encoder is ``telemetry.encoder`` (re-exported here: ``encode_spans``, ``encode_span``,
``encode_attributes``); ``encode_call`` (``telemetry.spans``) is a guard call through it.
``request_to_json`` and ``parse_request`` convert between that text and the protobuf messages, for
the sidecar receiver and for tests and loaders that want to check a line against the schema; they
import protobuf when first called, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from telemetry.encoder import encode_attributes, encode_request, encode_span, encode_spans
from telemetry.records import (
    EventRecord,
    KeyValueList,
    LinkRecord,
    ResourceGroup,
    ScopeGroup,
    SpanRecord,
)

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

__all__ = [  # noqa: F822 - encode_call is loaded on use
    "encode_attributes",
    "encode_call",
    "encode_span",
    "encode_spans",
    "parse_request",
    "request_to_json",
    "request_to_line",
]


def __getattr__(name: str) -> Any:
    if name == "encode_call":  # needs the guard: loaded on use
        from telemetry.spans import encode_call

        return encode_call
    raise AttributeError(f"module 'telemetry.otlpjson' has no attribute {name!r}")


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
    from google.protobuf import json_format  # type: ignore[import-untyped]
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

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
    from google.protobuf import json_format

    data = json_format.MessageToDict(request, use_integers_for_enums=True)
    data = _ids_to(data, _base64_to_hex)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _any(value: Any) -> Any:
    """A protobuf ``AnyValue`` as the Python value the encoder writes back."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return KeyValueList((pair.key, _any(pair.value)) for pair in value.kvlist_value.values)
    return getattr(value, kind)


def _pairs(attributes: Any) -> list[tuple[str, Any]]:
    return [(pair.key, _any(pair.value)) for pair in attributes]


def request_to_line(request: ExportTraceServiceRequest) -> str:
    """A received request as one OTLP JSON line, through the one encoder (``telemetry.encoder``).

    What the sidecar writes: the same text ``request_to_json`` makes (a test holds the two equal
    after parsing), several times faster, and in the trail's own encoding.
    """
    resources = []
    for resource_spans in request.resource_spans:
        scopes = []
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope
            spans = [
                SpanRecord(
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    trace_state=span.trace_state,
                    flags=span.flags,
                    name=span.name,
                    kind=span.kind,
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    attributes=_pairs(span.attributes),
                    dropped_attributes_count=span.dropped_attributes_count,
                    events=[
                        EventRecord(
                            name=event.name,
                            time_ns=event.time_unix_nano,
                            attributes=_pairs(event.attributes),
                        )
                        for event in span.events
                    ],
                    dropped_events_count=span.dropped_events_count,
                    links=[
                        LinkRecord(
                            trace_id=link.trace_id.hex(),
                            span_id=link.span_id.hex(),
                            trace_state=link.trace_state,
                            attributes=_pairs(link.attributes),
                            dropped_attributes_count=link.dropped_attributes_count,
                            flags=link.flags,
                        )
                        for link in span.links
                    ],
                    dropped_links_count=span.dropped_links_count,
                    status_code=span.status.code,
                    status_message=span.status.message,
                )
                for span in scope_spans.spans
            ]
            scopes.append(
                ScopeGroup(
                    name=scope.name,
                    version=scope.version,
                    attributes=_pairs(scope.attributes),
                    dropped_attributes_count=scope.dropped_attributes_count,
                    spans=spans,
                    schema_url=scope_spans.schema_url,
                )
            )
        resources.append(
            ResourceGroup(
                attributes=_pairs(resource_spans.resource.attributes),
                dropped_attributes_count=resource_spans.resource.dropped_attributes_count,
                scopes=scopes,
                schema_url=resource_spans.schema_url,
            )
        )
    return encode_request(resources)
