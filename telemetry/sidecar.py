"""The sidecar: an OTLP trace receiver that writes the same span files as the local trail.

An agent fleet on one host exports over OTLP (gRPC on 127.0.0.1:4317, HTTP protobuf or JSON on
127.0.0.1:4318) without running a collector. Built on the official opentelemetry-proto messages and
grpcio. Each accepted request becomes one OTLP JSON line: the text of the one span encoder
(``telemetry.encoder``), read from the protobuf bytes (``telemetry._otlp_wire``) or the parsed
message (``telemetry._otlp_proto``); or, for canonical OTLP/JSON, checked and passed through
(``telemetry._otlp_json``).

A malformed request gets the protocol's error answer (gRPC ``INVALID_ARGUMENT``, HTTP 400 with a
``google.rpc.Status`` body) and touches nothing else: no line is written, other clients carry on. A
request with some malformed spans among good ones keeps the good ones and is answered with OTLP
partial success (``rejected_spans`` and an error message).

Resources are bounded: bodies (on the wire and inflated) by ``max_body``, the bytes all requests in
flight hold by ``max_inflight``, HTTP connections by ``max_connections`` (idle ones closed after
``idle_timeout``), concurrent gRPC calls by ``workers``. With ``processes`` > 1, decoding,
encoding and writing move to that many worker processes (``telemetry._otlp_pool``), each with
its own span files and chain; protocols and limits stay in the receiving process. Binding an
address other than loopback needs a bearer ``token`` (checked in constant time, on both endpoints) or an explicit ``insecure``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceServicer

from telemetry._otlp_http import HTTPLimits, OTLPHTTPServer
from telemetry._otlp_json import NotCanonical, pass_through
from telemetry._otlp_limits import (
    DECODE_FACTOR,
    BodyTooLarge,
    ByteBudget,
    Unavailable,
    bearer_matches,
    is_loopback,
)
from telemetry._otlp_pool import JSON, PROTOBUF, EncoderPool, WriteFailed
from telemetry._otlp_proto import Encoded, encode_request
from telemetry._otlp_wire import encode_wire
from telemetry.otlpjson import parse_request
from telemetry.trail import SpanFileWriter

__all__ = ["Encoded", "OTLPReceiver", "ReceiverStats", "TraceReceiver"]

log = logging.getLogger(__name__)

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_JSON = "application/json"
MAX_BODY = 4 * 1024 * 1024
"""Default cap on one request body, on the wire and inflated (the Collector's gRPC default)."""
MAX_INFLIGHT = 256 * 1024 * 1024
"""Default cap on the bytes all requests in flight hold together, decoding included."""


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


class TraceReceiver(TraceServiceServicer):
    """Accepts ``ExportTraceServiceRequest`` messages and appends them to a ``SpanFileWriter``."""

    def __init__(
        self,
        writer: SpanFileWriter,
        *,
        budget: ByteBudget | None = None,
        pool: EncoderPool | None = None,
    ) -> None:
        self.writer = writer
        self.stats = ReceiverStats()
        self.budget = budget if budget is not None else ByteBudget(MAX_INFLIGHT)
        self.pool = pool
        """When set, serialized bodies are decoded, encoded and written by its worker processes."""
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

    def accept_body(self, body: bytes, content_type: str) -> Encoded:
        """Write one OTLP/HTTP body (protobuf or JSON); raises ``ValueError`` when malformed."""
        if content_type == _JSON:
            return self.accept_json(body)
        return self.accept_protobuf(body)

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
                raise Unavailable(
                    f"spans could not be stored: {error.strerror or error}"
                ) from error
        return self._count(encoded)

    def _pooled(self, pool: EncoderPool, kind: str, body: bytes) -> Encoded:
        """Have a worker process write ``body``; counted here from the outcome it returns."""
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

    def reject(self) -> None:
        with self._lock:
            self.stats.rejected += 1

    def Export(self, request: Any, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        """The gRPC method. Requests arrive as bytes so a malformed one is ours to answer."""
        size = len(request) if isinstance(request, bytes) else 0
        try:
            reserved = self.budget.reserve(size)
        except BodyTooLarge as error:
            self.reject()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        if not reserved:
            self.reject()
            context.abort(grpc.StatusCode.UNAVAILABLE, "busy: too many bytes in flight")
        try:
            if isinstance(request, bytes):
                encoded = self.accept_protobuf(request)
            else:
                encoded = self.accept(request)
        except BodyTooLarge as error:
            self.reject()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        except (DecodeError, ValueError, RecursionError) as error:
            self.reject()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {error}")
        except Unavailable as error:
            self.reject()
            context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        finally:
            self.budget.release(size)
        response = ExportTraceServiceResponse()
        if encoded.rejected:
            response.partial_success.rejected_spans = encoded.rejected
            response.partial_success.error_message = encoded.error
        return response


class _TokenCheck(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses a call whose ``authorization`` metadata is not ``Bearer <token>``: UNAUTHENTICATED."""

    def __init__(self, token: bytes, on_reject: Callable[[], None]) -> None:
        self._token = token

        def deny(request: Any, context: grpc.ServicerContext) -> None:
            on_reject()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        for key, value in details.invocation_metadata or ():
            if key == "authorization" and bearer_matches(value, self._token):
                return continuation(details)
        return self._deny


def _grpc_handler(receiver: TraceReceiver) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(
        receiver.Export,
        request_deserializer=None,  # raw bytes: decode errors become INVALID_ARGUMENT, not INTERNAL
        response_serializer=ExportTraceServiceResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(_SERVICE, {"Export": method})


class OTLPReceiver:
    """gRPC and HTTP OTLP trace endpoints in front of one ``SpanFileWriter``.

    Port 0 picks a free port; the bound ports are in ``grpc_port`` and ``http_port`` after ``start``.
    Either endpoint can be turned off with ``None``. ``token`` (if given) must come as
    ``authorization: Bearer <token>`` on every request; a ``host`` that is not loopback is refused
    (``ValueError``) without a token unless ``insecure`` is true.

    ``processes`` > 1 starts that many encoding worker processes (on ``start``, ended by ``stop``),
    each writing through its own ``writer_factory()`` writer (a picklable callable, e.g. a
    ``functools.partial`` of ``SpanFileWriter``); ``writer`` then only serves ``accept``.
    """

    def __init__(
        self,
        writer: SpanFileWriter,
        *,
        host: str = "127.0.0.1",
        grpc_port: int | None = 4317,
        http_port: int | None = 4318,
        workers: int = 8,
        token: str | bytes | None = None,
        insecure: bool = False,
        max_body: int = MAX_BODY,
        max_inflight: int = MAX_INFLIGHT,
        max_connections: int = 128,
        idle_timeout: float = 30.0,
        request_timeout: float = 60.0,
        processes: int = 1,
        writer_factory: Callable[[], SpanFileWriter] | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        if processes > 1 and writer_factory is None:
            raise ValueError("processes > 1 needs a writer_factory for the worker processes")
        if isinstance(token, str):
            token = token.encode("utf-8")
        if token is not None and not token.strip():
            raise ValueError("the bearer token is empty")
        if not is_loopback(host):
            if token is None and not insecure:
                raise ValueError(
                    f"refusing to bind {host!r} (not loopback) without a bearer token; give one "
                    "(--token-file, CALLGATE_SIDECAR_TOKEN; token=...), or --insecure "
                    "(insecure=True) to accept spans from anyone who can reach it"
                )
            if token is None:
                log.warning("sidecar: binding %s with no authentication (insecure)", host)
        self.receiver = TraceReceiver(writer, budget=ByteBudget(max_inflight))
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
        self.token = token
        self.max_body = max_body
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self._workers = workers
        self.processes = processes
        self._writer_factory = writer_factory
        self._grpc: grpc.Server | None = None
        self._http: OTLPHTTPServer | None = None
        self._http_thread: threading.Thread | None = None

    @property
    def stats(self) -> ReceiverStats:
        return self.receiver.stats

    def start(self) -> OTLPReceiver:
        """Bind and serve in background threads; returns self."""
        try:
            self._start()
        except BaseException:  # a port in use: no worker processes left behind
            self.stop(0)
            raise
        return self

    def _start(self) -> None:
        receiver = self.receiver
        if self.processes > 1 and self._writer_factory is not None and receiver.pool is None:
            receiver.pool = EncoderPool(self.processes, self._writer_factory).start()
        if self.grpc_port is not None:
            interceptors = [] if self.token is None else [_TokenCheck(self.token, receiver.reject)]
            server = grpc.server(
                futures.ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="otlp-grpc"
                ),
                interceptors=interceptors,
                options=[
                    ("grpc.max_receive_message_length", self.max_body),
                    # gRPC connections hold no thread; closing them at a short idle timeout races
                    # a client starting its next call (GOAWAY, UNAVAILABLE): at least 5 minutes.
                    ("grpc.max_connection_idle_ms", int(max(self.idle_timeout, 300.0) * 1000)),
                    ("grpc.max_concurrent_streams", self._workers),
                ],
                maximum_concurrent_rpcs=self._workers * 2,
            )
            server.add_generic_rpc_handlers((_grpc_handler(receiver),))
            address = f"[{self.host}]" if ":" in self.host else self.host
            self.grpc_port = server.add_insecure_port(f"{address}:{self.grpc_port}")
            server.start()
            self._grpc = server
        if self.http_port is not None:
            limits = HTTPLimits(
                max_body=self.max_body,
                budget=receiver.budget,
                max_connections=self.max_connections,
                idle_timeout=self.idle_timeout,
                request_timeout=self.request_timeout,
                token=self.token,
            )
            http = OTLPHTTPServer(
                (self.host, self.http_port),
                lambda body, content_type: self.receiver.accept_body(body, content_type),
                limits,
                lambda: self.receiver.reject(),
            )
            self.http_port = http.server_address[1]
            thread = threading.Thread(
                target=http.serve_forever, args=(0.05,), name="otlp-http", daemon=True
            )
            thread.start()
            self._http, self._http_thread = http, thread

    @property
    def http_server(self) -> OTLPHTTPServer | None:
        """The HTTP server while running (its connection counters are for tests and the CLI)."""
        return self._http

    def stop(self, grace: float = 2.0) -> None:
        """Stop accepting, finish requests in flight (up to ``grace`` s), close the file."""
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._http_thread is not None:
            self._http_thread.join(grace)
            self._http_thread = None
        if self.receiver.pool is not None:  # after the servers: requests in flight finish first
            self.receiver.pool.shutdown()
            self.receiver.pool = None
        self.receiver.writer.close()

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(receiver: OTLPReceiver, until: Callable[[], bool]) -> None:
    """Run ``receiver`` until ``until()`` is true (polled every 0.2 s), then stop it."""
    receiver.start()
    stop = threading.Event()
    try:
        while not until():
            stop.wait(0.2)
    finally:
        receiver.stop()
