"""The local trail: the guard's finished calls as OTLP JSON lines in span files.

``TrailSink`` is the observer's side: it takes finished calls off the calling thread, masks and
encodes them on its own thread, and writes them through a ``SpanFileWriter``
(``telemetry.spanfile``: size-rotated, chained files, which the sidecar writes too). It never drops
a call (a full queue makes the caller wait: the trail is an audit record, it must be complete);
what it cannot write it counts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from guard.call import Call
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.encoder import encode_spans
from telemetry.masking import Masker
from telemetry.records import AttributeValue, CallIds, encodable
from telemetry.spanfile import SpanFileWriter, TrailWriteError
from telemetry.spans import encode_call, span_count
from telemetry.worker import BatchWorker

__all__ = ["SpanFileWriter", "TrailSink", "TrailWriteError"]

log = logging.getLogger(__name__)


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TrailSink:
    """Finished calls -> masked span records -> OTLP JSON lines in the trail, off the calling thread."""

    def __init__(
        self,
        writer: SpanFileWriter,
        masker: Masker,
        *,
        resource: Mapping[str, AttributeValue],
        scope_version: str = "",
        capture_content: bool = False,
        capacity: int = 16_384,
        batch_size: int = 128,
    ) -> None:
        self.writer = writer
        self._masker = masker
        self._resource = dict(resource)
        self._scope_version = scope_version
        self._capture_content = capture_content
        self.spans = 0
        """Spans written so far."""
        self.errors = 0
        """Calls whose spans could not be built (a bug; logged): their spans are in ``lost_spans``."""
        self.lost_spans = 0
        """Spans that never reached the file: calls that could not be built, writes that failed."""
        self._worker: BatchWorker[tuple[Call, ToolResult, Any, CallIds | None]] = BatchWorker(
            self._write,
            name="callgate-trail",
            capacity=capacity,
            block=True,
            batch_size=batch_size,
        )

    @property
    def dropped(self) -> int:
        """Always 0 while open: the trail waits rather than drops."""
        return self._worker.dropped

    def submit(
        self, call: Call, result: ToolResult, parent: Any = None, ids: CallIds | None = None
    ) -> None:
        """Queue a finished call (calling thread: one deque append)."""
        self._worker.put((call, result, parent, ids))

    def _write(self, batch: list[tuple[Call, ToolResult, Any, CallIds | None]]) -> None:
        spans: list[str] = []
        built: list[tuple[Call, ToolResult, Any, CallIds | None]] = []
        count = 0
        for item in batch:
            text = self._encode(*item, check_text=False)
            if text is not None:
                spans.append(text)
                built.append(item)
                count += span_count(item[0])
        if not spans:
            return
        try:
            try:
                data = self._line(spans).encode("utf-8")
            except UnicodeEncodeError:  # a call held text UTF-8 cannot carry: redo those calls
                spans = [
                    text if _encodes(text) else (self._encode(*item, check_text=True) or "")
                    for text, item in zip(spans, built, strict=True)
                ]
                data = self._line([text for text in spans if text]).encode("utf-8")
            self.writer.write_lines([data])
        except Exception:
            self.lost_spans += count
            log.exception("the trail lost %d spans", count)
            return
        self.spans += count

    def _encode(
        self,
        call: Call,
        result: ToolResult,
        parent: Any,
        ids: CallIds | None,
        *,
        check_text: bool,
    ) -> str | None:
        """The call's spans as text, or None (counted) when they cannot be built."""
        try:
            link = None
            if parent is not None:
                link = (format(parent.trace_id, "032x"), format(parent.span_id, "016x"))
            return encode_call(
                call,
                result,
                self._masker,
                capture_content=self._capture_content,
                parent=link,
                check_text=check_text,
                ids=ids,
            )
        except Exception:  # one bad record must not cost the batch
            log.exception("could not build the spans of call %r", encodable(str(call.call_id)))
            self.errors += 1
            self.lost_spans += span_count(call)
            return None

    def _line(self, spans: list[str]) -> str:
        return encode_spans(
            spans,
            resource=self._resource,
            scope_name=attr.INSTRUMENTATION_SCOPE,
            scope_version=self._scope_version,
        )

    def force_flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued call is on disk."""
        return self._worker.flush(timeout)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Write what is queued, then close the file."""
        abandoned = self._worker.close(timeout)
        if abandoned:
            log.error("trail shutdown timed out: %d calls were not written", len(abandoned))
        self.writer.close()
        return not abandoned
