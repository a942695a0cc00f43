"""The sidecar: gRPC and HTTP OTLP trace endpoints in front of one ingest core.

``OTLPReceiver`` binds the transports (``grpc_server``, ``http_server``), gives both the same
``Ingest`` (decode, encode, write, count: ``ingest``), the same byte budget and the same bearer
check (``telemetry.auth``), and with ``processes`` > 1 starts the encoding workers (``pool``).
Binding an address other than loopback needs a bearer ``token`` (checked in constant time, on both
endpoints) or an explicit ``insecure``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

from telemetry.auth import BearerTokens, is_loopback
from telemetry.sidecar.grpc_server import grpc_server
from telemetry.sidecar.http_server import HTTPLimits, OTLPHTTPServer
from telemetry.sidecar.ingest import Ingest, ReceiverStats
from telemetry.sidecar.limits import MAX_BODY, MAX_INFLIGHT, ByteBudget
from telemetry.sidecar.pool import EncoderPool
from telemetry.spanfile import SpanFileWriter

__all__ = ["OTLPReceiver", "serve"]

log = logging.getLogger(__name__)


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
        self.verifier = None if token is None else BearerTokens.single(token)
        """The bearer check both endpoints make (``None``: no token asked for)."""
        if not is_loopback(host):
            if token is None and not insecure:
                raise ValueError(
                    f"refusing to bind {host!r} (not loopback) without a bearer token; give one "
                    "(--token-file, CALLGATE_SIDECAR_TOKEN; token=...), or --insecure "
                    "(insecure=True) to accept spans from anyone who can reach it"
                )
            if token is None:
                log.warning("sidecar: binding %s with no authentication (insecure)", host)
        self.ingest = Ingest(writer, budget=ByteBudget(max_inflight))
        """The core both endpoints hand their bodies to."""
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
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
        self._pool: EncoderPool | None = None

    @property
    def stats(self) -> ReceiverStats:
        return self.ingest.stats

    @property
    def pool(self) -> EncoderPool | None:
        """The encoding worker processes while running with ``processes`` > 1."""
        return self._pool

    def start(self) -> OTLPReceiver:
        """Bind and serve in background threads; returns self."""
        try:
            self._start()
        except BaseException:  # a port in use: no worker processes left behind
            self.stop(0)
            raise
        return self

    def _start(self) -> None:
        ingest = self.ingest
        if self.processes > 1 and self._writer_factory is not None and ingest.pool is None:
            ingest.pool = self._pool = EncoderPool(self.processes, self._writer_factory).start()
        if self.grpc_port is not None:
            address = f"[{self.host}]" if ":" in self.host else self.host
            self._grpc, self.grpc_port = grpc_server(
                ingest,
                f"{address}:{self.grpc_port}",
                verifier=self.verifier,
                workers=self._workers,
                max_body=self.max_body,
                idle_timeout=self.idle_timeout,
            )
        if self.http_port is not None:
            limits = HTTPLimits(
                max_body=self.max_body,
                budget=ingest.budget,
                max_connections=self.max_connections,
                idle_timeout=self.idle_timeout,
                request_timeout=self.request_timeout,
                verifier=self.verifier,
            )
            http = OTLPHTTPServer(
                (self.host, self.http_port),
                lambda body, content_type: self.ingest.accept_body(body, content_type),
                limits,
                lambda: self.ingest.reject(),
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
        if self._pool is not None:  # after the servers: requests in flight finish first
            self._pool.shutdown()
            self._pool = self.ingest.pool = None
        self.ingest.writer.close()

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
