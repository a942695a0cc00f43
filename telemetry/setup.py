"""``configure()``: the one call that wires callgate's telemetry. The only module that touches the SDK.

::

    handle = telemetry.configure(service_name="support-bot")
    guard = Guard(..., observer=handle.observer)
    ...
    handle.shutdown()

What it sets up, each part optional:

- the local trail: OTLP JSON lines in ``trail_dir`` (or ``CALLGATE_TRAIL_DIR``), complete, off the
  calling thread, hash-chained (``callgate verify``). On when a directory is given or
  ``trail=True`` (then ``./callgate-trail`` by default); a library that is only imported and
  configured writes no files unless asked;
- OTLP to a collector (on when ``otlp=True``, ``OTEL_TRACES_EXPORTER=otlp`` or an
  ``OTEL_EXPORTER_OTLP_*ENDPOINT`` is set): spans replayed through an SDK ``TracerProvider`` with a
  ``BatchSpanProcessor``; a collector that is down costs dropped spans (counted), never a slow call;
- ``OTEL_TRACES_EXPORTER=console``: the same, printed to stdout; ``none``: no exporter;
  other values are warned about and ignored;
- spans through the host's own ``TracerProvider``: ``tracer_provider=``, or the application's global
  one when it has set one (``trace.set_tracer_provider``), so callgate's call spans nest under the
  span that was current when each call started. The environment's OTLP settings are then the
  host's: callgate adds an exporter of its own only when asked (``otlp=True``, ``span_exporter=``);
- metrics through an SDK ``MeterProvider`` (``metric_readers=``, the host's ``meter_provider=``, or
  OTLP when OTLP is on).

Standard variables are honoured: ``OTEL_SDK_DISABLED``, ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``,
``OTEL_EXPORTER_OTLP_*`` headers/timeouts/compression (read by the exporters), ``OTEL_BSP_*`` (read by
the batch processor), ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` and
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. callgate's own: ``CALLGATE_TRAIL_DIR``,
``CALLGATE_MASKING_KEY``, ``CALLGATE_MASK_MODE``.

The masking key keys every hash callgate writes (pseudonymous principals, ``hash`` mode masks,
idempotency key hashes) and the trail's chain. Without one a random key is used per process: the
hashes then do not correlate across restarts, ``callgate report --principal`` cannot match, and the
chain is plain SHA-256 (it shows damage, not a deliberate edit); configure logs a warning.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api
from opentelemetry.context import Context
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

from telemetry import attributes as attr
from telemetry import logfilter
from telemetry.chain import chain_key
from telemetry.masking import Masker, MaskMode
from telemetry.metrics import MetricsSink
from telemetry.observer import CallSink, OTelObserver, TracerSink
from telemetry.records import AttributeValue
from telemetry.trail import SpanFileWriter, TrailSink

__all__ = ["Telemetry", "configure"]

log = logging.getLogger(__name__)


def _package_version() -> str:
    try:
        return version("callgate")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout
        return ""


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    return value in {"1", "true", "yes", "on"}


def _env_list(name: str) -> list[str]:
    return [item.strip().lower() for item in os.environ.get(name, "").split(",") if item.strip()]


class CountingSpanExporter(SpanExporter):
    """Wraps an exporter and counts the spans of batches it failed to deliver."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
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
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class _DropCounter:
    """Stands in for the batch processor's self-metrics to count the spans its full queue drops."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.dropped = 0

    def register_queue_size(self, get_queue_size: Any) -> None:
        self._inner.register_queue_size(get_queue_size)

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        self.dropped += count
        self._inner.drop_items(count, error_type)

    def finish_items(self, count: int) -> None:
        self._inner.finish_items(count)


class CountingSpanProcessor(SpanProcessor):
    """Wraps a ``BatchSpanProcessor``: counts the spans it drops, and paces bursts instead of dropping.

    Spans reach it on callgate's replay thread, never on a calling thread, so when the batch queue
    is full it may wait (up to ``max_wait`` seconds) for the exporter to make room: a burst to a
    live collector then loses nothing. A collector that stays down makes the wait time out; the
    processor then stops waiting for a second at a time and lets the queue drop (counted), so the
    replay thread keeps up and the observer's own queue never fills because of it.

    The SDK reports drops only as a log line and its optional self-metrics; the counter is put in
    place of the latter. Without these hooks (another SDK version) drops are estimated by size.
    """

    def __init__(self, inner: BatchSpanProcessor, *, max_wait: float = 1.0) -> None:
        self._inner = inner
        self._max_wait = max_wait
        self._stalled_until = 0.0
        self._fallback = 0
        self._counter: _DropCounter | None = None
        batch = getattr(inner, "_batch_processor", None)
        self._queue: Any = getattr(batch, "_queue", None)
        self._awaken: Any = getattr(batch, "_worker_awaken", None)
        if batch is not None and hasattr(batch, "_metrics"):
            self._counter = _DropCounter(batch._metrics)
            batch._metrics = self._counter

    @property
    def dropped(self) -> int:
        """Spans the batch processor dropped."""
        return self._counter.dropped if self._counter is not None else self._fallback

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self._inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        queue = self._queue
        if queue is not None and queue.maxlen is not None and len(queue) >= queue.maxlen:
            self._make_room(queue)
            if self._counter is None and len(queue) >= queue.maxlen:
                self._fallback += 1
        self._inner.on_end(span)

    def _make_room(self, queue: Any) -> None:
        now = time.monotonic()
        if now < self._stalled_until or self._max_wait <= 0:
            return
        if self._awaken is not None:
            self._awaken.set()  # export now rather than at the next scheduled delay
        deadline = now + self._max_wait
        while len(queue) >= queue.maxlen:
            if time.monotonic() >= deadline:
                self._stalled_until = time.monotonic() + 1.0
                return
            time.sleep(0.001)

    def shutdown(self) -> None:
        self._inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class Telemetry:
    """The handle ``configure`` returns: the observer to give the guard, and ``shutdown``."""

    def __init__(
        self,
        *,
        observer: OTelObserver,
        trail: TrailSink | None,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        counters: Sequence[CountingSpanProcessor | CountingSpanExporter],
        masker: Masker,
        log_filter: logfilter.MaskingFilter | None = None,
    ) -> None:
        self.observer = observer
        """Pass this to the guard (``observer=``)."""
        self.trail = trail
        """The local trail sink, or None."""
        self.tracer_provider = tracer_provider
        """The SDK provider callgate made for OTLP export, or None."""
        self.meter_provider = meter_provider
        """The SDK meter provider callgate made, or None."""
        self.masker = masker
        """The masker every sink uses."""
        self._counters = tuple(counters)
        self._log_filter = log_filter
        self._closed = False

    @property
    def trail_files(self) -> list[Path]:
        """The files the trail has written, oldest first."""
        return list(self.trail.writer.files) if self.trail is not None else []

    @property
    def trail_lost_spans(self) -> int:
        """Spans the trail could not write (a call that could not be encoded, a full disk)."""
        return self.trail.lost_spans if self.trail is not None else 0

    @property
    def dropped_spans(self) -> int:
        """Spans lost on the way to an exporter: full queues and failed exports. Never the trail's."""
        total = self.observer.dropped
        for counter in self._counters:
            total += counter.dropped if isinstance(counter, CountingSpanProcessor) else counter.failed
        return total

    def force_flush(self, timeout: float = 30.0) -> bool:
        """Push everything submitted so far to the trail and the exporters."""
        done = self.observer.force_flush(timeout)
        if self.tracer_provider is not None:
            done = self.tracer_provider.force_flush(int(timeout * 1000)) and done
        if self.meter_provider is not None:
            done = self.meter_provider.force_flush(int(timeout * 1000)) and done
        return done

    def shutdown(self, timeout: float = 30.0) -> None:
        """Flush and close everything callgate created (never the host's providers). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.observer.shutdown(timeout)
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown(int(timeout * 1000))
        if self._log_filter is not None:
            logfilter.uninstall(only=self._log_filter)


def _resource_attributes(resource: Resource) -> dict[str, AttributeValue]:
    result: dict[str, AttributeValue] = {}
    for key, value in resource.attributes.items():
        if isinstance(value, str | bool | int | float):
            result[key] = value
        elif isinstance(value, list | tuple):
            result[key] = [str(item) for item in value]
    return result


def _otlp_span_exporter(endpoint: str | None, protocol: str, timeout: float | None) -> SpanExporter:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        grpc_endpoint = endpoint
        insecure = None
        if endpoint is not None and endpoint.startswith("http://"):
            insecure = True
        return GrpcExporter(endpoint=grpc_endpoint, insecure=insecure, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/traces"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, timeout=timeout)


def _otlp_metric_reader(endpoint: str | None, protocol: str) -> MetricReader:
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return PeriodicExportingMetricReader(GrpcMetricExporter(endpoint=endpoint))
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpMetricExporter,
    )

    if endpoint is not None and not endpoint.rstrip("/").endswith("/v1/metrics"):
        endpoint = endpoint.rstrip("/") + "/v1/metrics"
    return PeriodicExportingMetricReader(HttpMetricExporter(endpoint=endpoint))


_TRACES_EXPORTERS = frozenset({"otlp", "console", "none"})
"""The ``OTEL_TRACES_EXPORTER`` values callgate honours."""


def _global_provider() -> trace_api.TracerProvider | None:
    """The application's global TracerProvider, or None when it has not set one."""
    provider = trace_api.get_tracer_provider()
    if isinstance(provider, trace_api.ProxyTracerProvider | trace_api.NoOpTracerProvider):
        return None
    return provider


def masker_key(key: bytes | str) -> bytes:
    """The masking key as bytes."""
    return key.encode() if isinstance(key, str) else key


def configure(
    *,
    service_name: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    trail: bool | None = None,
    trail_dir: str | os.PathLike[str] | None = None,
    trail_max_bytes: int = 64 * 1024 * 1024,
    otlp: bool | None = None,
    otlp_endpoint: str | None = None,
    otlp_protocol: str | None = None,
    otlp_timeout: float | None = None,
    span_exporter: SpanExporter | None = None,
    max_queue_size: int | None = None,
    tracer_provider: trace_api.TracerProvider | None = None,
    metrics: bool | None = None,
    metric_readers: Sequence[MetricReader] = (),
    meter_provider: metrics_api.MeterProvider | None = None,
    masking_key: bytes | str | None = None,
    mask_mode: MaskMode | str | None = None,
    max_attribute_length: int | None = None,
    capture_content: bool | None = None,
    link_parent: bool = True,
    use_global_provider: bool = True,
    mask_logs: bool = True,
) -> Telemetry:
    """Wire the trail, OTLP export, the host's provider and metrics; returns the handle.

    Arguments override the environment. ``trail`` None: on when ``trail_dir`` or
    ``CALLGATE_TRAIL_DIR`` names a directory. ``span_exporter`` replaces the OTLP exporter (tests,
    other backends) behind the same batch processor. ``use_global_provider``: replay spans through
    the application's global ``TracerProvider`` when it has set one and ``tracer_provider`` is not
    given. ``mask_logs`` masks what callgate's own loggers write (``telemetry.logfilter``): a
    tool's exception or a validation error can hold argument values. ``masking_key`` should come from the deployment's secrets; without one a random key is
    used and hashes do not correlate across restarts (see the module docstring).
    """
    version_ = _package_version()
    key = masking_key if masking_key is not None else os.environ.get("CALLGATE_MASKING_KEY")
    keyed = bool(key)
    if not key:
        log.warning(
            "no masking key (CALLGATE_MASKING_KEY): principal and mask hashes will not correlate "
            "across restarts, and the trail's chain is unkeyed; see the README, 'The masking key'"
        )
        key = secrets.token_bytes(32)
    limit = max_attribute_length or int(
        os.environ.get("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")
        or os.environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
        or 1024
    )
    masker = Masker(
        key=masker_key(key),
        mode=MaskMode(mask_mode or os.environ.get("CALLGATE_MASK_MODE") or MaskMode.REDACT),
        max_length=limit,
    )
    if capture_content is None:
        capture_content = bool(_env_flag("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"))
    log_filter = logfilter.install(masker) if mask_logs else None

    if _env_flag("OTEL_SDK_DISABLED"):
        return Telemetry(
            observer=OTelObserver([]),
            trail=None,
            tracer_provider=None,
            meter_provider=None,
            counters=(),
            masker=masker,
            log_filter=log_filter,
        )

    base: dict[str, Any] = dict(resource_attributes or {})
    if service_name:
        base["service.name"] = service_name
    base.setdefault("telemetry.distro.name", "callgate")
    resource = Resource.create(base)

    sinks: list[CallSink] = []
    counters: list[CountingSpanProcessor | CountingSpanExporter] = []

    trail_sink = None
    directory = trail_dir or os.environ.get("CALLGATE_TRAIL_DIR")
    if trail is None:
        trail = bool(directory)
    if trail:
        key_bytes = masker_key(key)
        trail_sink = TrailSink(
            SpanFileWriter(
                directory or "callgate-trail",
                max_bytes=trail_max_bytes,
                chain_key=chain_key(key_bytes) if keyed else None,
            ),
            masker,
            resource=_resource_attributes(resource),
            scope_version=version_,
            capture_content=capture_content,
        )
        sinks.append(trail_sink)

    traces_exporters = _env_list("OTEL_TRACES_EXPORTER")
    unknown = [name for name in traces_exporters if name not in _TRACES_EXPORTERS]
    if unknown:
        log.warning(
            "OTEL_TRACES_EXPORTER=%s: callgate knows only %s; ignoring %s",
            ",".join(traces_exporters),
            ", ".join(sorted(_TRACES_EXPORTERS)),
            ", ".join(unknown),
        )
    if tracer_provider is None and use_global_provider:
        tracer_provider = _global_provider()
    host_has_provider = tracer_provider is not None
    if otlp is None:
        from_env = bool(
            os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "otlp" in traces_exporters
        )
        otlp = bool(
            otlp_endpoint or span_exporter is not None or (from_env and not host_has_provider)
        ) and "none" not in traces_exporters
    console = "console" in traces_exporters and "none" not in traces_exporters
    protocol = (
        otlp_protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    own_provider = None
    exporters: list[SpanExporter] = []
    if otlp:
        exporters.append(span_exporter or _otlp_span_exporter(otlp_endpoint, protocol, otlp_timeout))
    if console:
        exporters.append(ConsoleSpanExporter())
    if exporters:
        own_provider = TracerProvider(resource=resource)
        batch = None if max_queue_size is None else min(512, max_queue_size)
        for inner in exporters:
            exporter = CountingSpanExporter(inner)
            processor = CountingSpanProcessor(
                BatchSpanProcessor(
                    exporter, max_queue_size=max_queue_size, max_export_batch_size=batch
                )
            )
            own_provider.add_span_processor(processor)
            counters += [exporter, processor]
        sinks.append(
            TracerSink(
                own_provider.get_tracer(attr.INSTRUMENTATION_SCOPE, version_ or None),
                masker,
                capture_content=capture_content,
            )
        )
    if tracer_provider is not None:
        sinks.append(
            TracerSink(
                tracer_provider.get_tracer(attr.INSTRUMENTATION_SCOPE, version_ or None),
                masker,
                capture_content=capture_content,
            )
        )

    own_meters = None
    if metrics is None:
        metrics = bool(metric_readers or meter_provider is not None or otlp) and "none" not in (
            _env_list("OTEL_METRICS_EXPORTER")
        )
    if metrics:
        if meter_provider is None:
            readers = list(metric_readers)
            if not readers and otlp and span_exporter is None:
                readers.append(_otlp_metric_reader(otlp_endpoint, protocol))
            own_meters = MeterProvider(resource=resource, metric_readers=readers)
            meter_provider = own_meters
        meter = meter_provider.get_meter(attr.INSTRUMENTATION_SCOPE, version_ or None)
        observer_ref: list[OTelObserver] = []

        def dropped() -> int:
            total = sum(sink.dropped for sink in observer_ref[0].sinks) if observer_ref else 0
            for counter in counters:
                total += counter.dropped if isinstance(counter, CountingSpanProcessor) else counter.failed
            return total

        sinks.append(MetricsSink(meter, dropped=dropped))
        observer = OTelObserver(sinks, link_parent=link_parent)
        observer_ref.append(observer)
    else:
        observer = OTelObserver(sinks, link_parent=link_parent)

    return Telemetry(
        observer=observer,
        trail=trail_sink,
        tracer_provider=own_provider,
        meter_provider=own_meters,
        counters=counters,
        masker=masker,
        log_filter=log_filter,
    )
