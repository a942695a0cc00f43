"""Span files: OTLP JSON lines appended to size-rotated files, one set per process, chained.

``SpanFileWriter`` appends whole lines (one ``write`` per batch on an ``O_APPEND`` descriptor) to
``<prefix>-<start time>-<pid>-<seq>.jsonl`` and starts the next file once the current one passes
``max_bytes``. Every line carries a link of a hash chain (``telemetry.chain``) so
``callgate verify`` can show the files were not edited. A write that fails (a full disk) is
truncated back to the last whole line, counted, and raised as ``TrailWriteError``; the writer keeps
going. A file left empty by a failed write is removed, so no file on disk is without a line.

Both writers of span files use it: the local trail (``telemetry.trail.TrailSink``, the guard's
side) and the sidecar (``telemetry.sidecar``). It imports no guard module, so neither does the
sidecar.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from telemetry.chain import Chain
from telemetry.records import encodable

__all__ = ["SpanFileWriter", "TrailWriteError"]

log = logging.getLogger(__name__)

_FILE_SUFFIX = ".jsonl"
_IOV_MAX = 1024
"""Pieces one ``writev`` may take (POSIX's minimum for ``IOV_MAX`` is 16; Linux takes 1024)."""


class TrailWriteError(OSError):
    """Lines could not be written (disk full, I/O error); the file was cut back to whole lines."""

    def __init__(self, lost: int, cause: OSError) -> None:
        super().__init__(cause.errno, f"{lost} trail lines not written: {cause.strerror or cause}")
        self.lost = lost
        """How many of the lines given were not written (all of them)."""


class SpanFileWriter:
    """Appends OTLP JSON lines to size-rotated files in ``directory``. Thread-safe.

    ``chain_key`` keys the chain's MACs (``callgate verify`` needs the same key); without one the
    chain is plain SHA-256, which shows damage and reordering but not a deliberate edit.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        prefix: str = "spans",
        max_bytes: int = 64 * 1024 * 1024,
        chain_key: bytes | None = None,
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
        self._chain = Chain(chain_key)
        self.files: list[Path] = []
        """Every file this writer has opened, oldest first."""
        self.lines = 0
        """Lines written so far."""
        self.lost_lines = 0
        """Lines that could not be written (each failed write's lines), never on disk."""
        self.write_errors = 0
        """Failed writes."""
        self.replaced_lines = 0
        """Lines that held text UTF-8 cannot carry (replaced by U+FFFD, written)."""

    @property
    def chain_id(self) -> str:
        """The id of this writer's chain (on every line it writes)."""
        return self._chain.id

    def _open_next(self) -> int:
        self._close_fd()
        self._seq += 1
        name = f"{self._prefix}-{self._stamp}-{os.getpid()}-{self._seq:04d}{_FILE_SUFFIX}"
        path = self.directory / name
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        self._size = os.fstat(self._fd).st_size
        self.files.append(path)
        return self._fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:  # pragma: no cover - close fails only on a broken device
                log.exception("could not close %s", self.files[-1])
            self._fd = None

    def _encode(self, line: str | bytes) -> bytes:
        if isinstance(line, bytes):
            return line
        try:
            return line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: only ever inside a JSON string
            self.replaced_lines += 1
            return encodable(line).encode("utf-8")

    def write_lines(self, lines: list[str] | list[bytes]) -> None:
        """Append ``lines`` (each without its newline; text, or UTF-8 bytes) as whole, chained
        lines; rotate first when full.

        Raises ``TrailWriteError`` when the write fails; the file then ends at its last whole line
        (or, if it cannot be cut back, the next write starts a new file), the lines are counted in
        ``lost_lines`` and the chain goes on from the last line that was written.
        """
        if not lines:
            return
        with self._lock:
            mark = self._chain.mark()
            pieces: list[bytes | memoryview] = []
            for line in lines:
                pieces.extend(self._chain.link_parts(self._encode(line)))
                pieces.append(b"\n")
            size = sum(len(piece) for piece in pieces)
            try:
                fd = self._fd
                if fd is None or (self._size > 0 and self._size + size > self._max_bytes):
                    fd = self._open_next()
                self._write_all(fd, pieces, size)
            except OSError as error:
                self._chain.reset(mark)
                self._drop_if_empty()
                self.lost_lines += len(lines)
                self.write_errors += 1
                raise TrailWriteError(len(lines), error) from error
            self._size += size
            self.lines += len(lines)

    def _write_all(self, fd: int, pieces: list[bytes | memoryview], size: int) -> None:
        """Write ``pieces`` (``size`` bytes) from where they are, with no copy of the lines (one
        large buffer more per batch costs more than the encoding, on some systems)."""
        try:
            written = os.writev(fd, pieces[:_IOV_MAX]) if len(pieces) <= _IOV_MAX else 0
            if written < size:  # a short write (or too many pieces): the rest, joined
                view = memoryview(b"".join(pieces))[written:]
                while view:
                    view = view[os.write(fd, view) :]
        except OSError:
            try:
                os.ftruncate(fd, self._size)  # back to the last whole line
            except OSError:
                log.exception(
                    "could not cut %s back to whole lines; starting a new file", self.files[-1]
                )
                self._close_fd()
            raise

    def _drop_if_empty(self) -> None:
        """After a failed write, remove the current file if it holds nothing: a file opened for
        a batch the disk refused would otherwise stay empty when no later write lands in it (the
        writer stopped while the disk was full), and ``callgate verify`` rightly names a file
        without a chained line. The next write opens it again, under the same name."""
        if self._fd is None or self._size > 0 or not self.files:
            return
        try:
            if os.fstat(self._fd).st_size > 0:  # pragma: no cover - cut back to 0 just before
                return
        except OSError:  # pragma: no cover - fstat of an open descriptor
            return
        self._close_fd()
        path = self.files.pop()
        self._seq -= 1
        try:
            path.unlink()
        except OSError:
            log.exception("could not remove the empty %s", path)

    def close(self) -> None:
        """Flush to disk and close the current file."""
        with self._lock:
            if self._fd is not None:
                try:
                    os.fsync(self._fd)
                except OSError:
                    log.exception("could not fsync %s", self.files[-1])
                self._close_fd()
