"""Metrics beside the spans: calls by tool and code, call and stage durations, dropped spans.

OpenTelemetry metrics API only; ``telemetry.setup`` supplies the SDK's ``MeterProvider``. Recording
happens on a thread of its own (a ``MetricsSink`` is one more sink of the observer), so instruments
cost the calling thread nothing; a full queue drops and counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from guard.call import Call
from guard.result import ToolResult
from telemetry.records import CallIds
from telemetry.worker import BatchWorker

__all__ = [
    "CALLS",
    "CALL_DURATION",
    "DROPPED_SPANS",
    "STAGE_DURATION",
    "MetricsSink",
]

log = logging.getLogger(__name__)

CALLS = "callgate.calls"
"""Counter of finished calls; attributes ``gen_ai.tool.name`` (``<unknown>`` for unknown tools),
``guard.code``, ``guard.ok``."""
CALL_DURATION = "callgate.call.duration"
"""Histogram of call durations in seconds; attributes ``gen_ai.tool.name``, ``guard.code``."""
STAGE_DURATION = "callgate.stage.duration"
"""Histogram of stage durations in seconds; attributes ``guard.stage.name``, ``guard.stage.outcome``."""
DROPPED_SPANS = "callgate.telemetry.dropped_spans"
"""Observable counter of spans lost on the way to an exporter (never the local trail's)."""

_UNKNOWN = "<unknown>"


class MetricsSink:
    """Records each finished call's metrics on ``meter``, off the calling thread."""

    def __init__(
        self,
        meter: Meter,
        *,
        dropped: Callable[[], int] | None = None,
        capacity: int = 16_384,
    ) -> None:
        self._calls = meter.create_counter(CALLS, unit="{call}", description="Finished tool calls.")
        self._call_duration = meter.create_histogram(
            CALL_DURATION, unit="s", description="Duration of tool calls through the guard."
        )
        self._stage_duration = meter.create_histogram(
            STAGE_DURATION, unit="s", description="Duration of each guard stage."
        )
        self._dropped_source = dropped
        meter.create_observable_counter(
            DROPPED_SPANS,
            callbacks=[self._observe_dropped],
            unit="{span}",
            description="Spans lost on the way to an exporter.",
        )
        self._worker: BatchWorker[tuple[Call, ToolResult]] = BatchWorker(
            self._record, name="callgate-metrics", capacity=capacity, block=False
        )

    @property
    def dropped(self) -> int:
        """Calls not recorded because the queue was full (not spans: 0 spans lost here)."""
        return 0

    def _observe_dropped(self, options: CallbackOptions) -> Iterable[Observation]:
        count = self._dropped_source() if self._dropped_source is not None else 0
        return [Observation(count)]

    def submit(
        self, call: Call, result: ToolResult, parent: Any = None, ids: CallIds | None = None
    ) -> None:
        """Queue a finished call for recording."""
        self._worker.put((call, result))

    def _record(self, batch: list[tuple[Call, ToolResult]]) -> None:
        for call, result in batch:
            tool = call.spec.name if call.spec is not None else _UNKNOWN
            code = str(result.code)
            self._calls.add(
                1, {"gen_ai.tool.name": tool, "guard.code": code, "guard.ok": result.ok}
            )
            if call.end_ns:
                self._call_duration.record(
                    (call.end_ns - call.start_ns) / 1e9,
                    {"gen_ai.tool.name": tool, "guard.code": code},
                )
            for stage in call.stages:
                self._stage_duration.record(
                    (stage.end_ns - stage.start_ns) / 1e9,
                    {"guard.stage.name": stage.name, "guard.stage.outcome": stage.outcome},
                )

    def force_flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued calls are recorded."""
        return self._worker.flush(timeout)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Record what is queued, then stop the thread."""
        return not self._worker.close(timeout)
