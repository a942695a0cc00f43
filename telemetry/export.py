"""OTLP export from the guard's process: the SDK side of ``configure()``, the ``[otlp]`` extra.

Imported only when export is asked for (OTLP, ``console``, a ``span_exporter`` or metrics of
callgate's own); without the SDK it raises one ``ImportError`` that names the extra. The trail and
a host's own ``TracerProvider`` need none of this.

Drops are counted through public SDK interfaces only: :class:`PacedSpanProcessor` admits a span to
its ``BatchSpanProcessor`` only while fewer than ``max_queue_size`` admitted spans are still
unexported (its :class:`CountingSpanExporter` reports each finished batch back), so the batch
processor's own queue never overflows and every span lost is one this module decided to drop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

try:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
except ImportError as missing:  # pragma: no cover - exercised by tests/test_install.py
    raise ImportError(
        "OTLP export needs the OpenTelemetry SDK: pip install 'callgate[otlp]' "
        f"(the trail and a host's own TracerProvider work without it; {missing})",
        name=missing.name,
    ) from missing

from opentelemetry.context import Context

__all__ = [
    "ConsoleSpanExporter",
    "CountingSpanExporter",
    "GivenIds",
    "MeterProvider",
    "PacedSpanProcessor",
    "Resource",
    "TracerProvider",
    "otlp_metric_reader",
    "otlp_span_exporter",
]

log = logging.getLogger("telemetry.setup")


class GivenIds(IdGenerator):
    """An id generator that gives the ids it was told to, on the thread told, else random ones.

    callgate's own ``TracerProvider`` draws through it: ``TracerSink`` gives it each call's ids
    (the ones the trail writes for that call) before replaying the call's spans, so both copies
    of a call carry the same trace and span ids. Any other thread, and any span beyond the ids
    given, gets random ids, as the SDK's default generator draws them."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._local = threading.local()

    def give(self, trace_id: int, span_ids: Sequence[int]) -> None:
        self._local.trace_id = trace_id
        self._local.span_ids = deque(span_ids)

    def clear(self) -> None:
        self._local.trace_id, self._local.span_ids = None, None

    def generate_trace_id(self) -> int:
        given: int | None = getattr(self._local, "trace_id", None)
        return given if given is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        given: deque[int] | None = getattr(self._local, "span_ids", None)
        return given.popleft() if given else self._random.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return True  # given ids come from telemetry.records.new_ids: os.urandom


class CountingSpanExporter(SpanExporter):
    """Wraps an exporter, counts the spans it delivered and failed, and reports each batch done."""

    def __init__(
        self, inner: SpanExporter, *, done: Callable[[int], None] = lambda n: None
    ) -> None:
        self._inner = inner
        self._done = done
        self.failed = 0
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            log.exception("span exporter raised")
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(spans)
        else:
            self.failed += len(spans)
        self._done(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class PacedSpanProcessor(SpanProcessor):
    """A ``BatchSpanProcessor`` that paces bursts instead of dropping, and counts what it drops.

    Spans reach it on callgate's replay thread, never on a calling thread, so when
    ``max_queue_size`` admitted spans are still unexported it waits (up to ``max_wait`` seconds)
    for a batch to finish: a burst to a live collector then loses nothing. A collector that stays
    down makes the wait time out; the processor then stops waiting for a second at a time and drops
    (counted), so the replay thread keeps up and the observer's own queue never fills because of it.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int,
        max_export_batch_size: int | None = None,
        max_wait: float = 1.0,
    ) -> None:
        self.exporter = CountingSpanExporter(exporter, done=self._finished)
        self._inner = BatchSpanProcessor(
            self.exporter,
            max_queue_size=max_queue_size,
            max_export_batch_size=max_export_batch_size,
        )
        self._limit = max_queue_size
        self._max_wait = max_wait
        self._room = threading.Condition()
        self._unexported = 0
        self._stalled_until = 0.0
        self.dropped = 0
        """Spans refused because the exporter had not made room in time."""

    @property
    def lost(self) -> int:
        """Spans that never reached the collector: dropped here or failed in export."""
        return self.dropped + self.exporter.failed

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None or not span.context.trace_flags.sampled:
            self._inner.on_end(span)  # the batch processor ignores it: nothing to count
            return
        with self._room:
            if self._unexported >= self._limit and not self._wait_for_room():
                self.dropped += 1
                return
            self._unexported += 1
        self._inner.on_end(span)

    def _wait_for_room(self) -> bool:
        """Wait for the exporter to finish a batch; False when it did not in time. Holds the lock."""
        now = time.monotonic()
        if now < self._stalled_until or self._max_wait <= 0:
            return False
        deadline = now + self._max_wait
        while self._unexported >= self._limit:
            left = deadline - time.monotonic()
            if left <= 0 or not self._room.wait(left):
                self._stalled_until = time.monotonic() + 1.0
                return False
        return True

    def _finished(self, count: int) -> None:
        with self._room:
            self._unexported -= count
            self._room.notify_all()

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _missing_grpc(missing: ImportError) -> ImportError:
    return ImportError(
        "OTLP over gRPC needs its exporter: pip install 'callgate[otlp-grpc]' "
        f"(or use OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf; {missing})",
        name=missing.name,
    )


def _missing_http(missing: ImportError) -> ImportError:
    return ImportError(
        f"OTLP export needs its exporter: pip install 'callgate[otlp]' ({missing})",
        name=missing.name,
    )


def otlp_span_exporter(endpoint: str | None, protocol: str, timeout: float | None) -> SpanExporter:
    """The OTLP span exporter for ``protocol`` (``grpc`` or ``http/protobuf``)."""
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as missing:
            raise _missing_grpc(missing) from missing
        insecure = True if endpoint is not None and endpoint.startswith("http://") else None
        return GrpcExporter(endpoint=endpoint, insecure=insecure, timeout=timeout)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )
    except ImportError as missing:
        raise _missing_http(missing) from missing

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, timeout=timeout)


def otlp_metric_reader(endpoint: str | None, protocol: str) -> MetricReader:
    """A periodic reader exporting metrics over OTLP to the traces' endpoint."""
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetricExporter,
            )
        except ImportError as missing:
            raise _missing_grpc(missing) from missing
        return PeriodicExportingMetricReader(GrpcMetricExporter(endpoint=endpoint))
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HttpMetricExporter,
        )
    except ImportError as missing:
        raise _missing_http(missing) from missing

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/metrics"):
        endpoint = endpoint.rstrip("/") + "/v1/metrics"
    return PeriodicExportingMetricReader(HttpMetricExporter(endpoint=endpoint))
