"""The OpenTelemetry observer: the guard's events in, spans out. OpenTelemetry API only.

The calling thread does almost nothing: at ``call_started`` the observer notes the host's current
span (so the call joins the agent's trace, under the span that was current when the call began, as
a framework's tool span is), and at ``call_ended`` it hands the finished ``Call`` to its sinks, each of which
queues it for a thread of its own. The span records are built there, masked, from the ``Call``
(``telemetry.spans``): the ``TrailSink`` encodes them to OTLP JSON lines, the ``TracerSink`` replays
them through an OpenTelemetry ``Tracer`` (the host's provider, or one that exports OTLP) with their
recorded start and end times. Every failure is logged and swallowed: telemetry never breaks a call.

One call is one set of ids everywhere: with ``share_ids`` the observer draws the call's trace and
span ids once (``telemetry.records.new_ids``) and hands them to every sink, and a ``TracerSink``
given an ``IdSource`` (``configure``'s own provider's id generator) makes the SDK use them, so the
trail's copy of a call and the collector's carry the same trace and span ids.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode

from guard.call import Call
from guard.observe import BaseObserver
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import Masker
from telemetry.records import STATUS_ERROR, CallIds, SpanRecord, new_ids
from telemetry.spans import build_call_spans, span_count
from telemetry.worker import BatchWorker

__all__ = ["CallSink", "IdSource", "OTelObserver", "TracerSink", "tracer_for"]

log = logging.getLogger(__name__)

_UNSEEN: Any = object()
"""A call whose start this observer did not see."""


class CallSink(Protocol):
    """Somewhere finished calls go. ``submit`` runs on the calling thread and must be cheap."""

    @property
    def dropped(self) -> int:
        """Calls (or spans) lost because the sink could not keep up."""

    def submit(
        self, call: Call, result: ToolResult, parent: Any = None, ids: CallIds | None = None
    ) -> None:
        """Take a finished call; ``parent`` is the host's current ``SpanContext`` or None; ``ids``
        the call's span ids when the observer shares them (``share_ids``), else None (only an
        observer built with ``share_ids`` passes them, so a sink may leave the parameter out)."""

    def force_flush(self, timeout: float | None = None) -> bool:
        """Push out everything submitted so far."""

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush and release resources."""


class IdSource(Protocol):
    """Where a tracer's SDK draws ids (``telemetry.export.GivenIds``): told the next ones to give."""

    def give(self, trace_id: int, span_ids: Sequence[int]) -> None:
        """Give ``trace_id`` and then ``span_ids`` in order to the spans this thread starts next."""

    def clear(self) -> None:
        """Go back to random ids on this thread."""


class OTelObserver(BaseObserver):
    """Implements ``guard.observe.Observer``: one call span plus a span per stage, through ``sinks``.

    ``link_parent`` makes a call a child of the span current on the calling thread when it ends (the
    agent's own span), so a host's trace shows the tool calls inside it. ``share_ids`` draws each
    call's ids here, once, and hands them to every sink (``submit(..., ids=)``), so the trail and
    the OTLP copy of one call carry the same ids; ``configure`` turns it on when it makes more than
    one span sink.
    """

    wants_stage_events = False
    """Stage timings are read from the finished call, so the pipeline skips per-stage events."""

    _MAX_OPEN = 65_536
    """Calls started and not yet ended whose parent is remembered (a bound, should a call never end)."""

    def __init__(
        self, sinks: Sequence[CallSink], *, link_parent: bool = True, share_ids: bool = False
    ) -> None:
        self.sinks = tuple(sinks)
        self._link_parent = link_parent
        self._share_ids = share_ids
        self._parents: dict[int, SpanContext | None] = {}

    def call_started(self, call: Call) -> None:
        """Note the span current when the call begins: the call span's parent."""
        if not self._link_parent:
            return
        try:
            context = trace.get_current_span().get_span_context()
            parents = self._parents
            if len(parents) >= self._MAX_OPEN:
                parents.clear()
            parents[id(call)] = context if context.is_valid else None  # None: seen, no parent
        except Exception:
            log.exception("telemetry observer failed at the start of a call")

    def call_ended(self, call: Call, result: ToolResult) -> None:
        try:
            parent = None
            if self._link_parent:
                parent = self._parents.pop(id(call), _UNSEEN)
                if parent is _UNSEEN:  # started before this observer: the span current now
                    parent = None
                    context = trace.get_current_span().get_span_context()
                    if context.is_valid:
                        parent = context
            if self._share_ids:
                ids = new_ids(span_count(call) - 1)  # the marks are final: the call ended
                for sink in self.sinks:
                    sink.submit(call, result, parent, ids=ids)
            else:
                for sink in self.sinks:
                    sink.submit(call, result, parent)
        except Exception:
            log.exception("telemetry observer failed for call %r", call.call_id)

    @property
    def dropped(self) -> int:
        """Calls the sinks lost (never the trail's)."""
        return sum(sink.dropped for sink in self.sinks)

    def force_flush(self, timeout: float | None = None) -> bool:
        """Flush every sink."""
        return all([sink.force_flush(timeout) for sink in self.sinks])

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush and close every sink."""
        return all([sink.shutdown(timeout) for sink in self.sinks])


_KINDS = {0: SpanKind.INTERNAL, 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT}


class TracerSink:
    """Replays each finished call through an OpenTelemetry ``Tracer``, on a thread of its own.

    Spans carry the times the ``Call`` recorded (``start_span(start_time=...)``,
    ``end(end_time=...)``). The queue never blocks the caller: when it is full the call's spans are
    dropped and counted (``dropped`` counts spans, for the ``dropped spans`` metric). With
    ``id_source`` (the id generator of the tracer's provider) the spans carry the records' ids,
    the ones the trail writes for the same call; without it the provider draws its own.
    """

    def __init__(
        self,
        tracer: trace.Tracer,
        masker: Masker,
        *,
        capture_content: bool = False,
        capacity: int = 4096,
        batch_size: int = 64,
        id_source: IdSource | None = None,
    ) -> None:
        self._tracer = tracer
        self._ids = id_source
        self._masker = masker
        self._capture_content = capture_content
        self._dropped_calls = 0
        self._worker: BatchWorker[tuple[Call, ToolResult, Any, CallIds | None]] = BatchWorker(
            self._replay,
            name="callgate-tracer",
            capacity=capacity,
            block=False,
            batch_size=batch_size,
        )

    @property
    def masker(self) -> Masker:
        """The masker of its spans, for spans made beside the guard's (the gateway's reads)."""
        return self._masker

    @property
    def tracer(self) -> trace.Tracer:
        """The tracer its spans go to, for spans made beside the guard's."""
        return self._tracer

    @property
    def dropped(self) -> int:
        """Spans lost to a full queue (each dropped call counted as its call and stage spans)."""
        return self._dropped_calls

    def submit(
        self, call: Call, result: ToolResult, parent: Any = None, ids: CallIds | None = None
    ) -> None:
        """Queue a finished call, or count its spans as dropped when the queue is full."""
        if not self._worker.put((call, result, parent, ids)):
            self._dropped_calls += span_count(call)

    def _replay(self, batch: list[tuple[Call, ToolResult, Any, CallIds | None]]) -> None:
        for call, result, parent, ids in batch:
            try:
                records = build_call_spans(
                    call, result, self._masker, capture_content=self._capture_content, ids=ids
                )
                if self._ids is None:
                    self._emit(records, parent)
                    continue
                self._ids.give(int(records[0].trace_id, 16), [int(r.span_id, 16) for r in records])
                try:
                    self._emit(records, parent)
                finally:
                    self._ids.clear()
            except Exception:
                log.exception("could not replay call %r as spans", call.call_id)

    def _emit(self, records: list[SpanRecord], parent: SpanContext | None) -> None:
        tracer = self._tracer
        head, stages = records[0], records[1:]
        context = None
        if parent is not None:
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        span = tracer.start_span(
            head.name,
            context=context,
            kind=_KINDS.get(head.kind, SpanKind.INTERNAL),
            attributes=dict(head.attributes),
            start_time=head.start_ns,
        )
        child_context = trace.set_span_in_context(span)
        for record in stages:
            child = tracer.start_span(
                record.name,
                context=child_context,
                kind=SpanKind.INTERNAL,
                attributes=dict(record.attributes),
                start_time=record.start_ns,
            )
            for event in record.events:
                child.add_event(event.name, dict(event.attributes), timestamp=event.time_ns)
            if record.status_code == STATUS_ERROR:
                child.set_status(Status(StatusCode.ERROR, record.status_message or None))
            child.end(end_time=record.end_ns)
        if head.status_code == STATUS_ERROR:
            span.set_status(Status(StatusCode.ERROR, head.status_message or None))
        span.end(end_time=head.end_ns)

    def force_flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued calls have been handed to the tracer."""
        return self._worker.flush(timeout)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Hand over what is queued, then stop the thread (the provider is the host's to shut).

        Calls still queued when ``timeout`` runs out are lost, and counted as dropped.
        """
        abandoned = self._worker.close(timeout)
        for call, *_ in abandoned:
            self._dropped_calls += span_count(call)
        return not abandoned


def tracer_for(provider: trace.TracerProvider | None, version: str = "") -> trace.Tracer:
    """The tracer callgate's spans come from, on ``provider`` (the global one when None)."""
    provider = provider or trace.get_tracer_provider()
    return provider.get_tracer(attr.INSTRUMENTATION_SCOPE, version or None)
