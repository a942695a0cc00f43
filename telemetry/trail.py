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
from typing import Any, TypeAlias

from guard.call import Call
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.calltext import encode_call
from telemetry.calltrail import encode_call_utf8
from telemetry.encoder import frame_spans
from telemetry.masking import Masker
from telemetry.records import AttributeValue, CallIds, encodable
from telemetry.spanfile import SpanFileWriter, TrailWriteError
from telemetry.spans import span_count
from telemetry.worker import BatchWorker

__all__ = ["SpanFileWriter", "TrailSink", "TrailWriteError"]

log = logging.getLogger(__name__)

_Item: TypeAlias = tuple[Call, ToolResult, Any, CallIds | None]
"""A finished call as the observer hands it over: call, result, host parent span, shared ids."""

LINE_BYTES = 48 * 1024
"""A trail line holds calls until it passes this many bytes (one call can pass it)."""


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
        head, tail = frame_spans(
            resource=self._resource,
            scope_name=attr.INSTRUMENTATION_SCOPE,
            scope_version=scope_version,
        )
        self._frame = (head.encode("utf-8"), tail.encode("utf-8"))  # made encodable there
        self.spans = 0
        """Spans written so far."""
        self.errors = 0
        """Calls whose spans could not be built (a bug; logged): their spans are in ``lost_spans``."""
        self.lost_spans = 0
        """Spans that never reached the file: calls that could not be built, writes that failed."""
        self._worker: BatchWorker[_Item] = BatchWorker(
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

    def _write(self, batch: list[_Item]) -> None:
        """Encode the batch's calls and write them a line at a time, each line as soon as it is
        full: one line's texts, its bytes and the chain's pieces are the only large buffers
        alive, so the allocator reuses them (a whole batch's texts alive at once made it fault
        in fresh pages for every batch, which cost more than building the lines)."""
        head, tail = self._frame
        run = [head]  # head, call, ",", call, ... : one join per line
        count = size = 0
        for item in batch:
            data = self._encode(*item)
            if data is None:
                continue
            if size and size + len(data) > LINE_BYTES:
                run[-1] = tail
                self._write_line(b"".join(run), count)
                run, count, size = [head], 0, 0
            run += (data, b",")
            count += span_count(item[0])
            size += len(data) + 1
        if count:
            run[-1] = tail
            self._write_line(b"".join(run), count)

    def _write_line(self, line: bytes, count: int) -> None:
        """Write one line holding ``count`` spans; count them as written or lost."""
        try:
            self.writer.write_lines([line])
        except Exception:
            self.lost_spans += count
            log.exception("the trail lost %d spans", count)
            return
        self.spans += count

    def _encode(
        self, call: Call, result: ToolResult, parent: Any, ids: CallIds | None
    ) -> bytes | None:
        """The call's spans as UTF-8, or None (counted) when they cannot be built."""
        try:
            link = None
            if parent is not None:
                link = (format(parent.trace_id, "032x"), format(parent.span_id, "016x"))
            try:
                return encode_call_utf8(
                    call,
                    result,
                    self._masker,
                    capture_content=self._capture_content,
                    parent=link,
                    ids=ids,
                )
            except UnicodeEncodeError:  # text UTF-8 cannot carry: replaced, and the span says so
                text = encode_call(
                    call,
                    result,
                    self._masker,
                    capture_content=self._capture_content,
                    parent=link,
                    check_text=True,
                    ids=ids,
                )
                return text.encode("utf-8")
        except Exception:  # one bad record must not cost the batch
            log.exception("could not build the spans of call %r", encodable(str(call.call_id)))
            self.errors += 1
            self.lost_spans += span_count(call)
            return None

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
