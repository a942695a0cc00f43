"""The local trail: OTLP JSON lines in files, one file per process, rotated by size.

``SpanFileWriter`` appends whole lines (one ``write`` per batch on an ``O_APPEND`` descriptor) to
``<prefix>-<start time>-<pid>-<seq>.jsonl`` and starts the next file once the current one passes
``max_bytes``. The sidecar writes through it too. ``TrailSink`` is the observer's side: it takes
finished calls off the calling thread, masks and encodes them on its own thread, and never drops one
(a full queue makes the caller wait: the trail is an audit record, it must be complete).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from guard.call import Call
from guard.result import ToolResult
from telemetry import attributes as attr
from telemetry.masking import Masker
from telemetry.records import AttributeValue, encode_spans
from telemetry.spans import encode_call
from telemetry.worker import BatchWorker

__all__ = ["SpanFileWriter", "TrailSink"]

log = logging.getLogger(__name__)

_FILE_SUFFIX = ".jsonl"


class SpanFileWriter:
    """Appends OTLP JSON lines to size-rotated files in ``directory``. Thread-safe."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        prefix: str = "spans",
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._prefix = prefix
        self._max_bytes = max_bytes
        self._stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._seq = 0
        self._fd: int | None = None
        self._size = 0
        self._lock = threading.Lock()
        self.files: list[Path] = []
        """Every file this writer has opened, oldest first."""
        self.lines = 0
        """Lines written so far."""

    def _open_next(self) -> int:
        if self._fd is not None:
            os.close(self._fd)
        self._seq += 1
        name = f"{self._prefix}-{self._stamp}-{os.getpid()}-{self._seq:04d}{_FILE_SUFFIX}"
        path = self.directory / name
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._size = os.fstat(self._fd).st_size
        self.files.append(path)
        return self._fd

    def write_lines(self, lines: list[str]) -> None:
        """Append ``lines`` (each without its newline) as whole lines; rotate first when full."""
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            fd = self._fd
            if fd is None or (self._size > 0 and self._size + len(data) > self._max_bytes):
                fd = self._open_next()
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            self._size += len(data)
            self.lines += len(lines)

    def close(self) -> None:
        """Flush to disk and close the current file."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None


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
        """Calls whose spans could not be built (a bug; logged)."""
        self._worker: BatchWorker[tuple[Call, ToolResult, Any]] = BatchWorker(
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

    def submit(self, call: Call, result: ToolResult, parent: Any = None) -> None:
        """Queue a finished call (calling thread: one deque append)."""
        self._worker.put((call, result, parent))

    def _write(self, batch: list[tuple[Call, ToolResult, Any]]) -> None:
        spans: list[str] = []
        masker = self._masker
        capture = self._capture_content
        for call, result, parent in batch:
            link = None
            if parent is not None:
                link = (format(parent.trace_id, "032x"), format(parent.span_id, "016x"))
            try:
                spans.append(encode_call(call, result, masker, capture_content=capture, parent=link))
            except Exception:  # one bad record must not cost the batch
                log.exception("could not build the spans of call %r", call.call_id)
                self.errors += 1
                continue
            self.spans += max(len(call.marks), 1)
        line = encode_spans(
            spans,
            resource=self._resource,
            scope_name=attr.INSTRUMENTATION_SCOPE,
            scope_version=self._scope_version,
        )
        if spans:
            self.writer.write_lines([line])

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
