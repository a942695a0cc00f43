"""callgate's OpenTelemetry side: masking, the observer, the local trail, OTLP export, the sidecar.

``configure()`` is the entry point; ``telemetry.attributes`` is the span contract.
"""

from telemetry.masking import (
    DETECTORS,
    INJECTION_RULES,
    Masker,
    MaskMode,
    detect_injection,
    luhn_valid,
)
from telemetry.metrics import MetricsSink
from telemetry.observer import CallSink, OTelObserver, TracerSink
from telemetry.otlpjson import encode_call, encode_spans, parse_request, request_to_json
from telemetry.setup import Telemetry, configure
from telemetry.sidecar import OTLPReceiver
from telemetry.spans import EventRecord, SpanRecord, build_call_spans
from telemetry.trail import SpanFileWriter, TrailSink

__all__ = [
    "DETECTORS",
    "INJECTION_RULES",
    "CallSink",
    "EventRecord",
    "MaskMode",
    "Masker",
    "MetricsSink",
    "OTLPReceiver",
    "OTelObserver",
    "SpanFileWriter",
    "SpanRecord",
    "Telemetry",
    "TracerSink",
    "TrailSink",
    "build_call_spans",
    "configure",
    "detect_injection",
    "encode_call",
    "encode_spans",
    "luhn_valid",
    "parse_request",
    "request_to_json",
]
