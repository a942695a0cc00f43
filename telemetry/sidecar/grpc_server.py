"""OTLP/gRPC for the sidecar: ``TraceService/Export`` in front of an ``Ingest``.

Requests arrive as raw bytes (no deserializer), so a malformed one is the ingest core's to refuse
(``INVALID_ARGUMENT``) rather than grpc's (``INTERNAL``). Every outcome maps to a status OTLP
exporters understand: ``RESOURCE_EXHAUSTED`` (too large), ``UNAVAILABLE`` (busy, not writable:
retried), ``UNAUTHENTICATED`` (no or wrong bearer token, checked by ``telemetry.auth``).

grpc hands a metadata value that is not UTF-8 over as ISO-8859-1 text (the wire bytes, which is
what ``telemetry.auth`` compares), but first logs it at ERROR with a traceback and the raw value:
any client could fill the log with tracebacks, and with near-miss tokens. ``_QuietUndecodable``
keeps one line at DEBUG, without the value.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceServicer

from telemetry.auth import TokenVerifier
from telemetry.sidecar.ingest import Ingest
from telemetry.sidecar.limits import BodyTooLarge, Unavailable

__all__ = ["TraceService", "grpc_server"]

_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_CYGRPC = "grpc._cython.cygrpc"
_UNDECODABLE = "Invalid encoding on %s"  # grpc's message for metadata that is not UTF-8


class _QuietUndecodable(logging.Filter):
    """grpc's "Invalid encoding on <raw value>" + traceback becomes one DEBUG line, no value."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _UNDECODABLE:
            record.msg, record.args = "grpc: a metadata value is not UTF-8 (read as ISO-8859-1)", ()
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _quiet_undecodable() -> None:
    logger = logging.getLogger(_CYGRPC)
    if not any(isinstance(f, _QuietUndecodable) for f in logger.filters):
        logger.addFilter(_QuietUndecodable())


class TraceService(TraceServiceServicer):
    """The gRPC servicer: each ``Export`` call handed to ``ingest``, its outcome as a status."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    def Export(self, request: Any, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        """The gRPC method. Requests arrive as bytes so a malformed one is ours to answer."""
        ingest = self.ingest
        size = len(request) if isinstance(request, bytes) else 0
        try:
            reserved = ingest.budget.reserve(size)
        except BodyTooLarge as error:
            ingest.reject()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        if not reserved:
            ingest.reject()
            context.abort(grpc.StatusCode.UNAVAILABLE, "busy: too many bytes in flight")
        try:
            if isinstance(request, bytes):
                encoded = ingest.accept_protobuf(request)
            else:
                encoded = ingest.accept(request)
        except BodyTooLarge as error:
            ingest.reject()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
        except (DecodeError, ValueError, RecursionError) as error:
            ingest.reject()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {error}")
        except Unavailable as error:
            ingest.reject()
            context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        finally:
            ingest.budget.release(size)
        response = ExportTraceServiceResponse()
        if encoded.rejected:
            response.partial_success.rejected_spans = encoded.rejected
            response.partial_success.error_message = encoded.error
        return response


class _TokenCheck(grpc.ServerInterceptor):  # type: ignore[misc]
    """Refuses a call whose one ``authorization`` metadata value ``verifier`` does not accept."""

    def __init__(self, verifier: TokenVerifier[object], on_reject: Callable[[], None]) -> None:
        self._verifier = verifier

        def deny(request: Any, context: grpc.ServicerContext) -> None:
            on_reject()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        values = [v for k, v in details.invocation_metadata or () if k == "authorization"]
        if len(values) == 1 and self._verifier.verify(values[0]) is not None:
            return continuation(details)
        return self._deny


def _handler(service: TraceService) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(
        service.Export,
        request_deserializer=None,  # raw bytes: decode errors become INVALID_ARGUMENT, not INTERNAL
        response_serializer=ExportTraceServiceResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(_SERVICE, {"Export": method})


def grpc_server(
    ingest: Ingest,
    address: str,
    *,
    verifier: TokenVerifier[object] | None,
    workers: int,
    max_body: int,
    idle_timeout: float,
) -> tuple[grpc.Server, int]:
    """A started gRPC server for ``ingest`` on ``address`` (``host:port``), and its bound port."""
    _quiet_undecodable()
    interceptors = [] if verifier is None else [_TokenCheck(verifier, ingest.reject)]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_body),
            # gRPC connections hold no thread; closing them at a short idle timeout races a
            # client starting its next call (GOAWAY, UNAVAILABLE): at least 5 minutes.
            ("grpc.max_connection_idle_ms", int(max(idle_timeout, 300.0) * 1000)),
            ("grpc.max_concurrent_streams", workers),
        ],
        maximum_concurrent_rpcs=workers * 2,
    )
    server.add_generic_rpc_handlers((_handler(TraceService(ingest)),))
    port = server.add_insecure_port(address)
    server.start()
    return server, port
