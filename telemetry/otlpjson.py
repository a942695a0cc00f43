"""OTLP JSON, exactly as the OpenTelemetry Collector's file exporter writes it.

One line is one ``ExportTraceServiceRequest`` in the OTLP/JSON mapping: ``resourceSpans`` ->
``scopeSpans`` -> ``spans``; trace and span ids as lowercase hex (not base64); ``kind`` and status
``code`` as integers; 64-bit integers (times, ``intValue``) as decimal strings; empty fields left out
(but ``resource``, ``scope`` and ``status``, always written).

The encoder is ``telemetry.encoder`` (re-exported here: ``encode_spans``, ``encode_span``,
``encode_attributes``); ``encode_call`` (``telemetry.spans``) is a guard call through it, and
``request_to_line`` a received protobuf request through it (the sidecar's text). ``request_to_json``
(``MessageToDict``) and ``parse_request`` convert between OTLP JSON and the protobuf messages, for
tests and loaders that want to check a line against the schema; they import protobuf when first
called, so importing this module stays cheap.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from telemetry.encoder import encode_attributes, encode_request, encode_span, encode_spans
from telemetry.sidecar.proto import request_groups

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
        from telemetry.calltext import encode_call

        return encode_call
    raise AttributeError(f"module 'telemetry.otlpjson' has no attribute {name!r}")


_ID_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


def _ids_to(data: Any, convert: Any) -> Any:
    """Rewrite every id field of an OTLP JSON structure with ``convert``."""
    if isinstance(data, dict):
        return {
            key: convert(value)
            if key in _ID_FIELDS and isinstance(value, str)
            else _ids_to(value, convert)
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


def request_to_line(request: ExportTraceServiceRequest) -> str:
    """A received request as one OTLP JSON line, through the one encoder (``telemetry.encoder``).

    Every span and group kept as it is (``telemetry.sidecar.proto.encode_request`` is the sidecar's
    form: malformed spans left out); the line parses back to the same message (a test holds them
    equal), in the trail's own encoding.
    """
    return encode_request(request_groups(request)[0])
