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
from telemetry.calltext import encode_call
from telemetry.encoder import frame_spans
from telemetry.masking import Masker
from telemetry.records import AttributeValue, CallIds, encodable
from telemetry.spanfile import SpanFileWriter, TrailWriteError
from telemetry.spans import span_count
from telemetry.worker import BatchWorker

__all__ = ["SpanFileWriter", "TrailSink", "TrailWriteError"]

log = logging.getLogger(__name__)

LINE_BYTES = 48 * 1024
"""A trail line holds calls until its text passes this many characters (one call can pass it)."""


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
        self._frame = frame_spans(
            resource=self._resource,
            scope_name=attr.INSTRUMENTATION_SCOPE,
            scope_version=scope_version,
        )
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
                lines = self._lines(spans)
            except UnicodeEncodeError:  # a call held text UTF-8 cannot carry: redo those calls
                spans = [
                    text if _encodes(text) else (self._encode(*item, check_text=True) or "")
                    for text, item in zip(spans, built, strict=True)
                ]
                lines = self._lines([text for text in spans if text])
            self.writer.write_lines(lines)
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

    def _lines(self, spans: list[str]) -> list[bytes]:
        """The calls' texts as UTF-8 lines (``encode_spans`` of each run of calls, from the sink's
        frame made once) of about ``LINE_BYTES`` at most each: a line's text, its bytes and the
        chain's copy stay small buffers the allocator reuses (two large ones alive at once cost
        more than all the encoding, on some systems)."""
        head, tail = self._frame
        lines: list[bytes] = []
        run = [head]  # head, span, ",", span, ... : one join per line
        size = 0
        for text in spans:
            if size and size + len(text) > LINE_BYTES:
                run[-1] = tail
                lines.append("".join(run).encode("utf-8"))
                run, size = [head], 0
            run += (text, ",")
            size += len(text) + 1
        run[-1] = tail
        lines.append("".join(run).encode("utf-8"))
        return lines

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
