"""``configure()``: the one call that wires callgate's telemetry.

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
  ``BatchSpanProcessor``; a collector that is down costs dropped spans (counted), never a slow call.
  Its spans carry the trail's ids: one call has one trace id and one set of span ids in both;
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

The environment is read in :mod:`telemetry.settings`; the SDK side (providers, exporters, the
counting batch processor) is :mod:`telemetry.export`, imported only when export is asked for, so a
core install (no ``[otlp]`` extra) configures and writes the trail, and asking it for OTLP export
raises one ``ImportError`` naming the extra.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from opentelemetry import metrics as metrics_api
from opentelemetry import trace as trace_api

from telemetry import attributes as attr
from telemetry import logfilter
from telemetry.chain import chain_key
from telemetry.masking import Masker, MaskMode
from telemetry.metrics import MetricsSink
from telemetry.observer import CallSink, OTelObserver, TracerSink
from telemetry.settings import Settings, read_settings
from telemetry.trail import SpanFileWriter, TrailSink

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from telemetry.export import GivenIds, PacedSpanProcessor

__all__ = ["Telemetry", "configure"]

log = logging.getLogger("telemetry")


class Telemetry:
    """The handle ``configure`` returns: the observer to give the guard, and ``shutdown``."""

    def __init__(
        self,
        *,
        observer: OTelObserver,
        trail: TrailSink | None,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        processors: Sequence[PacedSpanProcessor],
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
        self._processors = tuple(processors)
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
        return self.observer.dropped + _exporter_losses(self._processors)

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


def _exporter_losses(processors: Sequence[PacedSpanProcessor]) -> int:
    return sum(processor.lost for processor in processors)


def _global_provider() -> trace_api.TracerProvider | None:
    """The application's global TracerProvider, or None when it has not set one."""
    provider = trace_api.get_tracer_provider()
    if isinstance(provider, trace_api.ProxyTracerProvider | trace_api.NoOpTracerProvider):
        return None
    return provider


def _warn_service_name(service_name: str, provider: trace_api.TracerProvider) -> None:
    """Say so when ``service_name`` cannot reach the host provider's spans: their resource (and
    so their ``service.name``) is the provider's, fixed when the application built it."""
    resource = getattr(provider, "resource", None)  # the SDK's TracerProvider exposes it
    attributes = getattr(resource, "attributes", None) or {}
    theirs = attributes.get("service.name")
    if theirs != service_name:
        log.warning(
            "configure(service_name=%r) names the trail's and callgate's own exporter's spans; "
            "spans through the application's TracerProvider carry its service.name %r. Set "
            "service.name on that provider's Resource to change those.",
            service_name,
            theirs,
        )


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
    tool's exception or a validation error can hold argument values. ``masking_key`` should come
    from the deployment's secrets; without one a random key is used and hashes do not correlate
    across restarts (see the module docstring).
    """
    if tracer_provider is None and use_global_provider:
        tracer_provider = _global_provider()
    if service_name is not None and tracer_provider is not None:
        _warn_service_name(service_name, tracer_provider)
    settings = read_settings(
        service_name=service_name,
        resource_attributes=resource_attributes,
        trail=trail,
        trail_dir=trail_dir,
        trail_max_bytes=trail_max_bytes,
        otlp=otlp,
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol,
        otlp_timeout=otlp_timeout,
        custom_exporter=span_exporter is not None,
        host_provider=tracer_provider is not None,
        max_queue_size=max_queue_size,
        metrics=metrics,
        custom_metrics=bool(metric_readers) or meter_provider is not None,
        masking_key=masking_key,
        mask_mode=mask_mode,
        max_attribute_length=max_attribute_length,
        capture_content=capture_content,
    )
    masker = Masker(
        key=settings.masking_key, mode=settings.mask_mode, max_length=settings.max_attribute_length
    )
    log_filter = logfilter.install(masker) if mask_logs else None
    if settings.disabled:
        return Telemetry(
            observer=OTelObserver([]),
            trail=None,
            tracer_provider=None,
            meter_provider=None,
            processors=(),
            masker=masker,
            log_filter=log_filter,
        )

    trail_sink = _trail(settings, masker)
    sinks: list[CallSink] = [trail_sink] if trail_sink is not None else []
    own_provider, processors, own_ids = _own_provider(settings, span_exporter)
    for provider in (own_provider, tracer_provider):
        if provider is not None:
            tracer = provider.get_tracer(attr.INSTRUMENTATION_SCOPE, settings.version or None)
            # Our own provider draws the records' ids; the host's keeps its own id generator.
            given = own_ids if provider is own_provider else None
            sinks.append(
                TracerSink(
                    tracer, masker, capture_content=settings.capture_content, id_source=given
                )
            )
    # Two copies of a call (the trail, OTLP) name it by one set of ids, drawn once per call.
    share_ids = len(sinks) > 1

    own_meters = None
    if settings.metrics:
        if meter_provider is None:
            own_meters = _own_meters(settings, metric_readers)
            meter_provider = own_meters
        meter = meter_provider.get_meter(attr.INSTRUMENTATION_SCOPE, settings.version or None)
        sinks.append(MetricsSink(meter, dropped=lambda: _dropped(sinks, processors)))
    observer = OTelObserver(sinks, link_parent=link_parent, share_ids=share_ids)

    return Telemetry(
        observer=observer,
        trail=trail_sink,
        tracer_provider=own_provider,
        meter_provider=own_meters,
        processors=processors,
        masker=masker,
        log_filter=log_filter,
    )


def _dropped(sinks: Sequence[CallSink], processors: Sequence[PacedSpanProcessor]) -> int:
    """The dropped-spans counter: the observer's sinks and the exporters (what ``dropped_spans`` says)."""
    return sum(sink.dropped for sink in sinks) + _exporter_losses(processors)


def _trail(settings: Settings, masker: Masker) -> TrailSink | None:
    """The local trail's sink, or None when no trail was asked for."""
    if settings.trail_dir is None:
        return None
    writer = SpanFileWriter(
        settings.trail_dir,
        max_bytes=settings.trail_max_bytes,
        chain_key=chain_key(settings.masking_key) if settings.keyed else None,
    )
    return TrailSink(
        writer,
        masker,
        resource=dict(settings.resource),
        scope_version=settings.version,
        capture_content=settings.capture_content,
    )


def _own_provider(
    settings: Settings, span_exporter: SpanExporter | None
) -> tuple[TracerProvider | None, list[PacedSpanProcessor], GivenIds | None]:
    """callgate's own TracerProvider with one paced processor per exporter, if any is asked for,
    and the id generator it draws through (``GivenIds``: the records' ids)."""
    if not (settings.otlp or settings.console):
        return None, [], None
    from telemetry import export  # the [otlp] extra: one clear ImportError without it

    exporters: list[SpanExporter] = []
    if settings.otlp:
        exporters.append(
            span_exporter
            or export.otlp_span_exporter(
                settings.otlp_endpoint, settings.otlp_protocol, settings.otlp_timeout
            )
        )
    if settings.console:
        exporters.append(export.ConsoleSpanExporter())
    ids = export.GivenIds()
    provider = export.TracerProvider(
        resource=export.Resource.create(dict(settings.resource)), id_generator=ids
    )
    processors = [
        export.PacedSpanProcessor(
            exporter,
            max_queue_size=settings.max_queue_size,
            max_export_batch_size=settings.max_export_batch_size,
        )
        for exporter in exporters
    ]
    for processor in processors:
        provider.add_span_processor(processor)
    return provider, processors, ids


def _own_meters(settings: Settings, metric_readers: Sequence[MetricReader]) -> MeterProvider:
    """callgate's own MeterProvider over the caller's readers, or over OTLP beside the traces."""
    from telemetry import export  # the [otlp] extra: one clear ImportError without it

    readers = list(metric_readers)
    if not readers and settings.metrics_over_otlp:
        readers.append(export.otlp_metric_reader(settings.otlp_endpoint, settings.otlp_protocol))
    return export.MeterProvider(
        resource=export.Resource.create(dict(settings.resource)), metric_readers=readers
    )
