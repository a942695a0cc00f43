"""The sidecar: an OTLP trace receiver that writes the same span files as the local trail.

An agent fleet on one host exports over OTLP (gRPC on 127.0.0.1:4317, HTTP protobuf or JSON on
127.0.0.1:4318) without running a collector. Each accepted request becomes one OTLP JSON line in
the span files (``telemetry.spanfile``) before it is answered.

The ingest core, apart from the transports::

    ingest.py        Ingest: body -> line -> span file, and the counts (ReceiverStats)
      wire.py        protobuf bytes -> the line, reading the wire for the repetitive parts
      proto.py       a parsed message -> span records (Encoded: a line and what was left out)
      passthrough.py canonical OTLP/JSON, checked and passed through
      limits.py      the byte budget, bounded inflating, Content-Length; the refusals
    pool.py          EncoderPool: N worker processes, each with its own Ingest and files
    grpc_server.py   TraceService/Export over an Ingest
    http_server.py   POST /v1/traces over an Ingest, hardened
    receiver.py      OTLPReceiver: both transports, one core, one bearer check (telemetry.auth)

A malformed request gets the protocol's error answer (gRPC ``INVALID_ARGUMENT``, HTTP 400 with a
``google.rpc.Status`` body) and touches nothing else; a request with some malformed spans among
good ones keeps the good ones and is answered with OTLP partial success. The core imports neither
grpc nor any guard module; the package imports nothing until a name is used (PEP 562), so a worker
process or ``telemetry.otlpjson`` loads only the modules it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from telemetry.sidecar.ingest import Ingest, ReceiverStats
    from telemetry.sidecar.limits import MAX_BODY, MAX_INFLIGHT
    from telemetry.sidecar.pool import EncoderPool
    from telemetry.sidecar.proto import Encoded
    from telemetry.sidecar.receiver import OTLPReceiver, serve

__all__ = [
    "MAX_BODY",
    "MAX_INFLIGHT",
    "Encoded",
    "EncoderPool",
    "Ingest",
    "OTLPReceiver",
    "ReceiverStats",
    "serve",
]

_HOME: dict[str, str] = {
    "MAX_BODY": "telemetry.sidecar.limits",
    "MAX_INFLIGHT": "telemetry.sidecar.limits",
    "Encoded": "telemetry.sidecar.proto",
    "EncoderPool": "telemetry.sidecar.pool",
    "Ingest": "telemetry.sidecar.ingest",
    "OTLPReceiver": "telemetry.sidecar.receiver",
    "ReceiverStats": "telemetry.sidecar.ingest",
    "serve": "telemetry.sidecar.receiver",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'telemetry.sidecar' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
