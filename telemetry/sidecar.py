"""The sidecar: an OTLP trace receiver that writes the same span files as the local trail.

An agent fleet on one host exports over OTLP (gRPC on 127.0.0.1:4317, HTTP protobuf or JSON on
127.0.0.1:4318) without running a collector. Built on the official opentelemetry-proto messages and
grpcio. Each accepted request becomes one OTLP JSON line. A malformed request gets the protocol's
error answer (gRPC ``INVALID_ARGUMENT``, HTTP 400 with a ``google.rpc.Status`` body) and touches
nothing else: no line is written, other clients carry on.
"""

from __future__ import annotations

import gzip
import logging
import threading
import zlib
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceServicer

from telemetry.otlpjson import parse_request, request_to_json
from telemetry.trail import SpanFileWriter

__all__ = ["OTLPReceiver", "ReceiverStats", "TraceReceiver"]

log = logging.getLogger(__name__)

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_MAX_BODY = 16 * 1024 * 1024
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


@dataclass(slots=True)
class ReceiverStats:
    """What the receiver has seen."""

    requests: int = 0
    spans: int = 0
    rejected: int = 0


def _check(request: ExportTraceServiceRequest) -> int:
    """Spans in ``request``; raises ``ValueError`` when an id has the wrong length."""
    count = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                if len(span.trace_id) != 16 or len(span.span_id) != 8:
                    raise ValueError("trace_id must be 16 bytes and span_id 8 bytes")
                if span.parent_span_id and len(span.parent_span_id) != 8:
                    raise ValueError("parent_span_id must be 8 bytes")
                count += 1
    return count


class TraceReceiver(TraceServiceServicer):
    """Accepts ``ExportTraceServiceRequest`` messages and appends them to a ``SpanFileWriter``."""

    def __init__(self, writer: SpanFileWriter) -> None:
        self.writer = writer
        self.stats = ReceiverStats()
        self._lock = threading.Lock()

    def accept(self, request: ExportTraceServiceRequest) -> None:
        """Validate and write one request; raises ``ValueError`` when it is malformed."""
        count = _check(request)
        if count:
            self.writer.write_lines([request_to_json(request)])
        with self._lock:
            self.stats.requests += 1
            self.stats.spans += count

    def reject(self) -> None:
        with self._lock:
            self.stats.rejected += 1

    def Export(self, request: Any, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        """The gRPC method. Requests arrive as bytes so a malformed one is ours to answer."""
        try:
            if isinstance(request, bytes):
                request = ExportTraceServiceRequest.FromString(request)
            self.accept(request)
        except (DecodeError, ValueError) as error:
            self.reject()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {error}")
        return ExportTraceServiceResponse()


def _grpc_handler(receiver: TraceReceiver) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(
        receiver.Export,
        request_deserializer=None,  # raw bytes: decode errors become INVALID_ARGUMENT, not INTERNAL
        response_serializer=ExportTraceServiceResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(_SERVICE, {"Export": method})


def _http_handler(receiver: TraceReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "callgate-sidecar"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s", format % args)

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _error(self, status: int, message: str, content_type: str) -> None:
            receiver.reject()
            error = status_pb2.Status(code=3 if status == 400 else 2, message=message)
            if content_type == _JSON:
                self._answer(status, json_format.MessageToJson(error).encode(), _JSON)
            else:
                self._answer(status, error.SerializeToString(), _PROTOBUF)

        def do_POST(self) -> None:
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            answer_type = _JSON if content_type == _JSON else _PROTOBUF
            if self.path.split("?")[0].rstrip("/") != "/v1/traces":
                self._drain()
                self._error(HTTPStatus.NOT_FOUND, "unknown path; use /v1/traces", answer_type)
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self.close_connection = True
                self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request too large", answer_type)
                return
            body = self.rfile.read(length)
            if content_type not in (_JSON, _PROTOBUF):
                self._error(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported content type", answer_type)
                return
            try:
                body = self._decompress(body)
                if content_type == _JSON:
                    request = parse_request(body)
                else:
                    request = ExportTraceServiceRequest.FromString(body)
                receiver.accept(request)
            except (DecodeError, ValueError, OSError, EOFError, zlib.error) as error:
                self._error(HTTPStatus.BAD_REQUEST, f"malformed request: {error}", answer_type)
                return
            response = ExportTraceServiceResponse()
            if answer_type == _JSON:
                self._answer(HTTPStatus.OK, json_format.MessageToJson(response).encode(), _JSON)
            else:
                self._answer(HTTPStatus.OK, response.SerializeToString(), _PROTOBUF)

        def _drain(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if 0 < length <= _MAX_BODY:
                self.rfile.read(length)

        def _decompress(self, body: bytes) -> bytes:
            encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
            if encoding == "gzip":
                return gzip.decompress(body)
            if encoding == "deflate":
                return zlib.decompress(body)
            if encoding not in ("", "identity"):
                raise ValueError(f"unsupported content encoding {encoding!r}")
            return body

    return Handler


class OTLPReceiver:
    """gRPC and HTTP OTLP trace endpoints in front of one ``SpanFileWriter``.

    Port 0 picks a free port; the bound ports are in ``grpc_port`` and ``http_port`` after ``start``.
    Either endpoint can be turned off with ``None``.
    """

    def __init__(
        self,
        writer: SpanFileWriter,
        *,
        host: str = "127.0.0.1",
        grpc_port: int | None = 4317,
        http_port: int | None = 4318,
        workers: int = 8,
    ) -> None:
        self.receiver = TraceReceiver(writer)
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
        self._workers = workers
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None

    @property
    def stats(self) -> ReceiverStats:
        return self.receiver.stats

    def start(self) -> OTLPReceiver:
        """Bind and serve in background threads; returns self."""
        if self.grpc_port is not None:
            server = grpc.server(
                futures.ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="otlp-grpc"),
                options=[("grpc.max_receive_message_length", _MAX_BODY)],
            )
            server.add_generic_rpc_handlers((_grpc_handler(self.receiver),))
            self.grpc_port = server.add_insecure_port(f"{self.host}:{self.grpc_port}")
            server.start()
            self._grpc = server
        if self.http_port is not None:
            http = ThreadingHTTPServer((self.host, self.http_port), _http_handler(self.receiver))
            http.daemon_threads = True
            self.http_port = http.server_address[1]
            thread = threading.Thread(
                target=http.serve_forever, args=(0.05,), name="otlp-http", daemon=True
            )
            thread.start()
            self._http, self._http_thread = http, thread
        return self

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
