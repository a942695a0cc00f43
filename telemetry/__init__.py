"""callgate's OpenTelemetry side: masking, the observer, the local trail, OTLP export, the sidecar.

``configure()`` is the entry point; ``telemetry.attributes`` is the span contract.

The package imports nothing until a name is used (PEP 562): ``from telemetry import attributes``
loads the contract alone (no guard, no OpenTelemetry SDK, no grpc), which is all analytics and the
dashboard need. ``telemetry.configure`` and the rest load their modules on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from telemetry.calltext import encode_call
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
    from telemetry.otlpjson import encode_spans, parse_request, request_to_json
    from telemetry.records import EventRecord, SpanRecord
    from telemetry.setup import Telemetry, configure
    from telemetry.sidecar import OTLPReceiver
    from telemetry.spanfile import SpanFileWriter
    from telemetry.spans import build_call_spans
    from telemetry.trail import TrailSink

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

_HOME: dict[str, str] = {
    "DETECTORS": "telemetry.masking",
    "INJECTION_RULES": "telemetry.masking",
    "Masker": "telemetry.masking",
    "MaskMode": "telemetry.masking",
    "detect_injection": "telemetry.masking",
    "luhn_valid": "telemetry.masking",
    "MetricsSink": "telemetry.metrics",
    "CallSink": "telemetry.observer",
    "OTelObserver": "telemetry.observer",
    "TracerSink": "telemetry.observer",
    "encode_call": "telemetry.calltext",
    "encode_spans": "telemetry.otlpjson",
    "parse_request": "telemetry.otlpjson",
    "request_to_json": "telemetry.otlpjson",
    "EventRecord": "telemetry.records",
    "SpanRecord": "telemetry.records",
    "Telemetry": "telemetry.setup",
    "configure": "telemetry.setup",
    "OTLPReceiver": "telemetry.sidecar",
    "build_call_spans": "telemetry.spans",
    "SpanFileWriter": "telemetry.spanfile",
    "TrailSink": "telemetry.trail",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'telemetry' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
