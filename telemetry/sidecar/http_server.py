"""OTLP/HTTP for the sidecar: ``POST /v1/traces``, protobuf or JSON, hardened.

Every request gets an answer (the Collector's codes: 400 malformed, 401 no or wrong token, 404 path,
405 method, 411 no length, 413 too large, 415 content type, 501 transfer coding, 503 busy, 500 a
bug), and a connection is closed whenever what follows on it cannot be trusted. Bodies come with a
``Content-Length`` (digits only) or ``Transfer-Encoding: chunked`` (read chunk by chunk under the same
cap); gzip/deflate bodies are inflated in steps up to the cap. Every byte a request holds is
reserved from the receiver's ``ByteBudget`` first. Connections beyond ``max_connections`` are
answered 503 and closed at once; an idle connection, or a request that takes longer than
``idle_timeout`` between two reads, is closed.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from telemetry.auth import TokenVerifier
from telemetry.sidecar.limits import (
    BodyTooLarge,
    ByteBudget,
    Unavailable,
    inflate,
    parse_content_length,
)
from telemetry.sidecar.proto import Encoded

__all__ = ["HTTPLimits", "OTLPHTTPServer", "RequestRefused"]

log = logging.getLogger(__name__)

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_CHUNK = 64 * 1024
_MAX_CHUNK_LINE = 1024
_MAX_TRAILERS = 64
_LINGER_BYTES = 8 * 1024 * 1024
_MAX_HEADER_LINES = 101  # 100 headers and the blank line
_MAX_HEADER_BYTES = 64 * 1024


class RequestRefused(Exception):
    """A request the receiver will not take: answered with ``status`` and ``message``."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


@dataclass(frozen=True, slots=True)
class HTTPLimits:
    """The HTTP endpoint's limits (see ``OTLPReceiver`` for what each is)."""

    max_body: int
    budget: ByteBudget
    max_connections: int
    idle_timeout: float
    request_timeout: float
    verifier: TokenVerifier[object] | None
    """The bearer check (``telemetry.auth``); ``None`` when no token is asked for."""


Accept = Callable[[bytes, str], Encoded]
"""``(body, content type) -> Encoded``; raises ``ValueError`` when the body is malformed."""


def _status_body(status: int, message: str, content_type: str) -> bytes:
    error = status_pb2.Status(code=3 if status == 400 else 2, message=message)
    if content_type == _JSON:
        return str(json_format.MessageToJson(error, indent=None)).encode()
    return bytes(error.SerializeToString())


def _response_body(encoded: Encoded, content_type: str) -> bytes:
    response = ExportTraceServiceResponse()
    if encoded.rejected:
        response.partial_success.rejected_spans = encoded.rejected
        response.partial_success.error_message = encoded.error
    if content_type == _JSON:
        return str(json_format.MessageToJson(response, indent=None)).encode()
    return bytes(response.SerializeToString())


_OK = {kind: _response_body(Encoded("", 0, 0), kind) for kind in (_JSON, _PROTOBUF)}


class _HeaderLimit:
    """The connection's reader while headers are parsed: at most 100 lines and 64 KiB in all.

    ``http.client`` counts header lines against a module global that other libraries raise
    (clickhouse-connect sets it to 10,000 on import: 10,000 lines of 64 KiB); this bound is ours.
    """

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._lines = 0
        self._bytes = 0

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self._reader.readline(limit)
        self._lines += 1
        self._bytes += len(line)
        if self._lines > _MAX_HEADER_LINES or self._bytes > _MAX_HEADER_BYTES:
            raise http.client.HTTPException("too many header lines or bytes")
        return line


def _handler(accept: Accept, limits: HTTPLimits, on_reject: Callable[[], None]) -> type[Any]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "callgate-sidecar"
        timeout = limits.idle_timeout  # per read: idle keep-alive connections and slow senders
        rbufsize = _CHUNK

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s", format % args)

        _expects_continue = False

        def handle_expect_100(self) -> bool:
            # http.server would say "100 Continue" before any check; say it after ours pass.
            self._expects_continue = True
            return True

        def parse_request(self) -> bool:
            reader = self.rfile
            self.rfile = _HeaderLimit(reader)  # type: ignore[assignment]
            try:
                return super().parse_request()
            finally:
                self.rfile = reader

        def setup(self) -> None:
            super().setup()
            with contextlib.suppress(OSError):
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def handle_one_request(self) -> None:
            # The reaper closes the socket of a request still unanswered at its deadline, however
            # slowly its bytes trickle in (the per-read timeout alone would not catch that).
            self._expects_continue = False
            server: OTLPHTTPServer = self.server  # type: ignore[assignment]
            server.watch(self.connection, time.monotonic() + limits.request_timeout)
            try:
                super().handle_one_request()
            finally:
                server.unwatch(self.connection)

        def send_error(
            self, code: int, message: str | None = None, explain: str | None = None
        ) -> None:
            # http.server's own errors (bad request line, long headers, unknown method): our body.
            self.close_connection = True
            self._answer(code, _status_body(code, message or "", _PROTOBUF), _PROTOBUF)
            self._linger()

        def _answer(
            self, status: int, body: bytes, content_type: str, *extra: tuple[str, str]
        ) -> None:
            # One write for head and body: two small writes meet Nagle and delayed ACK (40 ms each).
            self.log_request(status)
            try:
                phrase = HTTPStatus(status).phrase
            except ValueError:
                phrase = ""
            head = (
                f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\n"
            )
            for name, value in extra:
                head += f"{name}: {value}\r\n"
            if self.close_connection:
                head += "Connection: close\r\n"
            self.wfile.write(head.encode("latin-1") + b"\r\n" + body)

        def _refuse(self, refused: RequestRefused, content_type: str) -> None:
            on_reject()
            if refused.close:
                self.close_connection = True
            extra: list[tuple[str, str]] = []
            if refused.status == HTTPStatus.SERVICE_UNAVAILABLE:
                extra.append(("Retry-After", "1"))
            if refused.status == HTTPStatus.UNAUTHORIZED:
                extra.append(("WWW-Authenticate", "Bearer"))
            body = _status_body(refused.status, refused.message, content_type)
            self._answer(refused.status, body, content_type, *extra)
            if refused.close:
                self._linger()

        def _linger(self) -> None:
            """Half-close, then drop what the client still sends (bounded) before closing.

            Closing with unread bytes makes the kernel send a reset, which can destroy the answer
            before the client reads it; this way a client still sending its body gets the 413.
            """
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_WR)
                self.connection.settimeout(0.2)
                deadline = time.monotonic() + 1.0
                left = _LINGER_BYTES
                while left > 0 and time.monotonic() < deadline:
                    data = self.connection.recv(min(left, _CHUNK))
                    if not data:
                        break
                    left -= len(data)

        def do_POST(self) -> None:
            raw_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            content_type = _JSON if raw_type == _JSON else _PROTOBUF
            held = 0
            try:
                body, held = self._body(raw_type)
                encoded = accept(body, content_type)
            except RequestRefused as refused:
                self._refuse(refused, content_type)
                return
            except BodyTooLarge as error:
                self._refuse(RequestRefused(413, str(error), close=True), content_type)
                return
            except Unavailable as error:
                self._refuse(RequestRefused(503, str(error), close=True), content_type)
                return
            except (ValueError, RecursionError, UnicodeError) as error:
                self._refuse(RequestRefused(400, f"malformed request: {error}"), content_type)
                return
            except OSError:  # the peer went away or stalled past the timeout: nobody to answer
                self.close_connection = True
                return
            except Exception as error:  # a bug: still answer, and keep serving
                log.exception("sidecar: request failed")
                self._refuse(
                    RequestRefused(500, f"internal error: {type(error).__name__}", close=True),
                    content_type,
                )
                return
            finally:
                limits.budget.release(held)
            if encoded.rejected:
                self._answer(HTTPStatus.OK, _response_body(encoded, content_type), content_type)
            else:
                self._answer(HTTPStatus.OK, _OK[content_type], content_type)

        def _refuse_method(self) -> None:
            self.close_connection = True
            self._refuse(RequestRefused(405, "use POST /v1/traces", close=True), _PROTOBUF)

        do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _refuse_method

        def _body(self, content_type: str) -> tuple[bytes, int]:
            """The request's body, inflated; and the bytes reserved for it (the caller releases)."""
            headers = self.headers
            try:
                length = parse_content_length(headers.get_all("Content-Length") or [])
            except ValueError as error:
                raise RequestRefused(400, str(error), close=True) from error
            codings = [
                part.strip().lower()
                for value in headers.get_all("Transfer-Encoding") or []
                for part in value.split(",")
                if part.strip()
            ]
            if codings and length is not None:
                raise RequestRefused(400, "both Content-Length and Transfer-Encoding", close=True)
            if codings and codings != ["chunked"]:
                raise RequestRefused(501, f"unsupported transfer coding {codings}", close=True)
            if limits.verifier is not None:
                given = headers.get_all("Authorization") or []
                if len(given) != 1 or limits.verifier.verify(given[0]) is None:
                    raise RequestRefused(401, "missing or wrong bearer token", close=True)
            if self.path.split("?")[0].rstrip("/") != "/v1/traces":
                raise RequestRefused(404, "unknown path; use /v1/traces", close=True)
            if content_type not in (_JSON, _PROTOBUF):
                raise RequestRefused(415, "unsupported content type", close=True)
            if length is not None and length > limits.max_body:
                raise RequestRefused(413, "request too large", close=True)
            if not codings and length is None:
                raise RequestRefused(
                    411, "Content-Length or chunked transfer coding required", close=True
                )
            held = 0
            try:
                if length is not None:
                    if not limits.budget.reserve(length):
                        raise RequestRefused(503, "busy: too many bytes in flight", close=True)
                    held = length
                if self._expects_continue:  # only now, once the request is one we will read
                    self._expects_continue = False
                    self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                if length is not None:
                    wire = self._read_exact(length)
                else:
                    wire, held = self._read_chunked()
                encoding = self.headers.get("Content-Encoding") or ""
                if encoding.strip().lower() in ("", "identity"):
                    return wire, held
                body = inflate(wire, encoding, limits.max_body, limits.budget)
                held += len(body)
                return body, held
            except BaseException:
                limits.budget.release(held)
                raise

        def _read_exact(self, length: int) -> bytes:
            parts = []
            left = length
            while left:
                piece = self.rfile.read1(min(left, _CHUNK))
                if not piece:
                    raise RequestRefused(400, "body shorter than Content-Length", close=True)
                parts.append(piece)
                left -= len(piece)
            return b"".join(parts)

        def _read_chunked(self) -> tuple[bytes, int]:
            parts: list[bytes] = []
            size = 0
            try:
                while True:
                    line = self.rfile.readline(_MAX_CHUNK_LINE + 1)
                    if len(line) > _MAX_CHUNK_LINE or not line.endswith(b"\n"):
                        raise RequestRefused(400, "malformed chunk size line", close=True)
                    text = line.split(b";")[0].strip()
                    if (
                        not text
                        or len(text) > 8
                        or not all(c in b"0123456789abcdefABCDEF" for c in text)
                    ):
                        raise RequestRefused(400, "malformed chunk size", close=True)
                    chunk = int(text, 16)
                    if chunk == 0:
                        break
                    if size + chunk > limits.max_body:
                        raise RequestRefused(413, "request too large", close=True)
                    if not limits.budget.reserve(chunk):
                        raise RequestRefused(503, "busy: too many bytes in flight", close=True)
                    size += chunk
                    parts.append(self._read_exact(chunk))
                    if self.rfile.read(2) not in (b"\r\n",):
                        raise RequestRefused(400, "chunk not followed by CRLF", close=True)
                for _ in range(_MAX_TRAILERS):
                    line = self.rfile.readline(_MAX_CHUNK_LINE + 1)
                    if line in (b"\r\n", b"\n"):
                        return b"".join(parts), size
                    if not line or len(line) > _MAX_CHUNK_LINE:
                        break
                raise RequestRefused(400, "malformed chunked trailer", close=True)
            except BaseException:
                limits.budget.release(size)
                raise

    return Handler


class OTLPHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with a cap on connections (one thread each) and no lingering threads."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        accept: Accept,
        limits: HTTPLimits,
        on_reject: Callable[[], None],
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        # Before the bind: a bind that fails calls server_close, which must not hide its OSError.
        self._reaper_stop = threading.Event()
        super().__init__(address, _handler(accept, limits, on_reject))
        self.limits = limits
        self._active = 0
        self._active_lock = threading.Lock()
        self.refused_connections = 0
        self.accepted_connections = 0
        self.reaped_connections = 0
        self._deadlines: dict[socket.socket, float] = {}
        self._reaper = threading.Thread(target=self._reap, name="otlp-http-reaper", daemon=True)
        self._reaper.start()

    def watch(self, connection: socket.socket, deadline: float) -> None:
        with self._active_lock:
            self._deadlines[connection] = deadline

    def unwatch(self, connection: socket.socket) -> None:
        with self._active_lock:
            self._deadlines.pop(connection, None)

    def _reap(self) -> None:
        while not self._reaper_stop.wait(0.25):
            now = time.monotonic()
            with self._active_lock:
                late = [sock for sock, deadline in self._deadlines.items() if deadline < now]
                for sock in late:
                    del self._deadlines[sock]
            for sock in late:
                self.reaped_connections += 1
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def server_close(self) -> None:
        self._reaper_stop.set()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._active_lock:
            full = self._active >= self.limits.max_connections
            if not full:
                self._active += 1
                self.accepted_connections += 1
        if full:
            self.refused_connections += 1
            try:
                request.settimeout(0.5)
                body = _status_body(503, "too many connections", _PROTOBUF)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + _PROTOBUF.encode()
                    + b"\r\nContent-Length: " + str(len(body)).encode()
                    + b"\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body
                )  # fmt: skip
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            with self._active_lock:
                self._active -= 1
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._active_lock:
                self._active -= 1

    @property
    def active_connections(self) -> int:
        return self._active
