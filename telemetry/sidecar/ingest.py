"""The sidecar's core: request bodies in, span-file lines out, with the counts; no transport.

``Ingest`` decodes a body (OTLP/protobuf or OTLP/JSON), encodes its spans as the trail's one line
(``telemetry.encoder``, reached through ``telemetry.sidecar.wire`` for protobuf bytes,
``telemetry.sidecar.proto`` for a parsed message, ``telemetry.sidecar.passthrough`` for canonical
JSON) and appends it to a ``SpanFileWriter`` before returning: what it returns is on disk. The
transports (``grpc_server``, ``http_server``) turn its outcomes into their protocols' answers; the
encoding worker processes (``pool``) each run one of their own. It imports neither grpc nor any
guard module.

Outcomes: an ``Encoded`` (written; malformed spans among good ones left out and counted), or
``ValueError`` (malformed: nothing written), ``BodyTooLarge``, ``Unavailable`` (the byte budget is
full) or ``WriteFailed`` (the line could not be written; the client keeps its spans and retries).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from telemetry.otlpjson import parse_request
from telemetry.sidecar.limits import (
    DECODE_FACTOR,
    MAX_INFLIGHT,
    ByteBudget,
    Unavailable,
    WriteFailed,
)
from telemetry.sidecar.passthrough import NotCanonical, pass_through
from telemetry.sidecar.proto import Encoded, encode_request
from telemetry.sidecar.wire import encode_wire
from telemetry.spanfile import SpanFileWriter

__all__ = ["JSON", "PROTOBUF", "Ingest", "Offload", "ReceiverStats"]

log = logging.getLogger(__name__)

PROTOBUF = "protobuf"
"""A body's kind: a serialized ``ExportTraceServiceRequest`` (gRPC, HTTP protobuf)."""
JSON = "json"
"""A body's kind: OTLP/JSON (HTTP ``application/json``)."""
_JSON_TYPE = "application/json"


@dataclass(slots=True)
class ReceiverStats:
    """What the receiver has seen."""

    requests: int = 0
    """Requests accepted (wholly or partly)."""
    spans: int = 0
    """Spans written."""
    rejected: int = 0
    """Requests refused (malformed, too large, unauthorized, busy)."""
    rejected_spans: int = 0
    """Malformed spans left out of otherwise accepted requests."""
    write_errors: int = 0
    """Requests answered "unavailable" because their line could not be written."""


class Offload(Protocol):
    """Somewhere else to decode, encode and write a body (``pool.EncoderPool``: worker processes).

    ``accept`` returns what was written (with no line) or raises what ``Ingest`` would.
    """

    def accept(self, kind: str, body: bytes) -> Encoded: ...


class Ingest:
    """Bodies -> lines appended to ``writer``, counted in ``stats``. Thread-safe.

    ``budget`` bounds the memory decoding may take (``DECODE_FACTOR`` x each body, held while the
    body is decoded). With ``pool`` set, bodies are decoded, encoded and written there instead.
    """

    def __init__(
        self,
        writer: SpanFileWriter,
        *,
        budget: ByteBudget | None = None,
        pool: Offload | None = None,
    ) -> None:
        self.writer = writer
        self.stats = ReceiverStats()
        self.budget = budget if budget is not None else ByteBudget(MAX_INFLIGHT)
        self.pool = pool
        """When set, serialized bodies are decoded, encoded and written by it."""
        self._lock = threading.Lock()

    def encode(self, request: ExportTraceServiceRequest) -> Encoded:
        """``request`` as a line, malformed spans left out."""
        return encode_request(request)

    def encode_protobuf(self, body: bytes) -> Encoded:
        """A serialized request as a line: read from the wire, or parsed with upb when unusual."""
        encoded = encode_wire(body)
        if encoded is not None:
            return encoded
        try:
            request = ExportTraceServiceRequest.FromString(body)
        except DecodeError as error:
            raise ValueError(str(error)) from error
        return self.encode(request)

    def decode_json(self, body: bytes) -> Encoded:
        """An OTLP/JSON body as a line: passed through when canonical, else via the message."""
        try:
            encoded = pass_through(body)
            encoded.line.encode("utf-8")  # an escaped lone surrogate cannot be written
            return encoded
        except (NotCanonical, UnicodeEncodeError):
            return self.encode(parse_request(body))

    def accept(self, request: ExportTraceServiceRequest) -> Encoded:
        """Write one request's good spans; raises ``ValueError`` when it has spans but no good one."""
        return self._write(self.encode(request))

    def accept_protobuf(self, body: bytes) -> Encoded:
        """Write one serialized request; raises ``ValueError`` when malformed."""
        with self._decoding(len(body)):  # held while a worker has the body, too
            if self.pool is not None:
                return self._pooled(self.pool, PROTOBUF, body)
            return self._write(self.encode_protobuf(body))

    def accept_json(self, body: bytes) -> Encoded:
        """Write one OTLP/JSON request; raises ``ValueError`` when malformed."""
        with self._decoding(len(body)):
            if self.pool is not None:
                return self._pooled(self.pool, JSON, body)
            return self._write(self.decode_json(body))

    def accept_body(self, body: bytes, content_type: str) -> Encoded:
        """Write one OTLP/HTTP body (protobuf or JSON); raises ``ValueError`` when malformed."""
        if content_type == _JSON_TYPE:
            return self.accept_json(body)
        return self.accept_protobuf(body)

    def reject(self) -> None:
        """Count a request refused before (or instead of) reaching ``accept``."""
        with self._lock:
            self.stats.rejected += 1

    @contextlib.contextmanager
    def _decoding(self, size: int) -> Iterator[None]:
        """Hold the memory decoding ``size`` bytes may take (``DECODE_FACTOR`` x) from the budget."""
        need = size * DECODE_FACTOR
        if not self.budget.reserve(need):
            raise Unavailable("busy: too many bytes in flight")
        try:
            yield
        finally:
            self.budget.release(need)

    def _write(self, encoded: Encoded) -> Encoded:
        if not encoded.spans and encoded.rejected:
            raise ValueError(encoded.error)
        if encoded.line:
            try:
                self.writer.write_lines([encoded.line])
            except OSError as error:  # disk full, I/O error: the client keeps the spans and retries
                log.error("sidecar: could not write spans: %s", error)
                with self._lock:
                    self.stats.write_errors += 1
                raise WriteFailed(
                    f"spans could not be stored: {error.strerror or error}"
                ) from error
        return self._count(encoded)

    def _pooled(self, pool: Offload, kind: str, body: bytes) -> Encoded:
        """Have the pool write ``body``; counted here from the outcome it returns."""
        try:
            encoded = pool.accept(kind, body)
        except WriteFailed:
            with self._lock:
                self.stats.write_errors += 1
            raise
        return self._count(encoded)

    def _count(self, encoded: Encoded) -> Encoded:
        with self._lock:
            self.stats.requests += 1
            self.stats.spans += encoded.spans
            self.stats.rejected_spans += encoded.rejected
        return encoded
