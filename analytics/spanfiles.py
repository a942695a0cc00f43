"""Span files on disk: finding them (rotations included), recognising them, reading new lines.

Finding them is :func:`telemetry.discovery.discover_files`, re-exported here: ``callgate verify``
asks the same function, so it checks exactly the files the loader reads.

A span file is OTLP JSON lines, plain or gzip. It is recognised by the SHA-256 of its first line
(:func:`fingerprint`), which a rename or a later gzip does not change; :func:`sniff` refuses files
that are not trace lines before anything is written.
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from telemetry.discovery import discover_files

__all__ = [
    "ForeignFileError",
    "GzipPrefixReader",
    "Region",
    "complete_end",
    "copy_region",
    "count_lines",
    "discover_files",
    "fingerprint",
    "is_gzip",
    "line_problem",
    "literal_path",
    "open_span_file",
    "sniff",
]

_SNIFF_LINES = 20


class ForeignFileError(ValueError):
    """The file is not OTLP JSON trace lines; nothing was loaded from any file."""


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


class GzipPrefixReader(io.RawIOBase):
    """A gzip file's decompressed bytes (every member, in order) up to where its data ends.

    ``gzip.GzipFile`` raises ``EOFError`` on a truncated file and loses the whole buffer it was
    filling, so a cut file read as nothing. This yields every byte before the cut and then ends;
    :attr:`truncated` says whether it was cut (or corrupt) rather than complete.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self._file = path.open("rb")
        self._inflate = zlib.decompressobj(wbits=31)
        self._fed = False
        self._pending = b""
        self._done = False
        self.truncated = False
        """The data ended inside a gzip member (a cut or still-growing file), or was corrupt."""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending and not self._done:
            self._pending = self._inflate_next()
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _inflate_next(self) -> bytes:
        chunk = self._file.read(1 << 16)
        if not chunk:
            self._done = True
            self.truncated = self._fed and not self._inflate.eof
            return b""
        out = []
        while chunk:
            if self._inflate.eof:  # the next member of a concatenated gzip
                self._inflate, self._fed = zlib.decompressobj(wbits=31), False
            try:
                out.append(self._inflate.decompress(chunk))
            except zlib.error:
                self._done = self.truncated = True
                break
            self._fed = True
            chunk = self._inflate.unused_data if self._inflate.eof else b""
        return b"".join(out)

    def close(self) -> None:
        self._file.close()
        super().close()


@contextmanager
def open_span_file(path: Path, compressed: bool, start: int = 0) -> Iterator[io.BufferedIOBase]:
    """The file's (decompressed) bytes from offset ``start``; a cut gzip ends where its data does."""
    raw: io.RawIOBase = GzipPrefixReader(path) if compressed else path.open("rb", buffering=0)
    stream = io.BufferedReader(raw, 1 << 20)
    try:
        if compressed:
            _skip(stream, start)
        else:
            stream.seek(start)
        yield stream
    finally:
        stream.close()


def _skip(stream: io.BufferedIOBase, n: int) -> None:
    while n > 0:
        chunk = stream.read(min(n, 8 << 20))
        if not chunk:
            return
        n -= len(chunk)


def literal_path(path: Path, workdir: Path) -> Path:
    """``path``, or a link to it in ``workdir`` when its name holds glob characters.

    DuckDB reads every file name as a pattern: ``[x].jsonl`` would read ``x.jsonl``. The link's
    name is plain, so DuckDB reads exactly the named file.
    """
    if not any(c in str(path) for c in _GLOB_CHARACTERS):
        return path
    link = workdir / "source.jsonl"
    link.symlink_to(path.resolve())
    if any(c in str(link) for c in _GLOB_CHARACTERS):
        raise ValueError(f"the temporary directory's name holds glob characters: {workdir}")
    return link


_GLOB_CHARACTERS = "*?[]{}\\"


def _lines(path: Path, compressed: bool, limit: int) -> list[bytes]:
    out: list[bytes] = []
    with open_span_file(path, compressed) as stream:
        for line in stream:
            out.append(line)
            if len(out) >= limit:
                break
    return out


def fingerprint(first_line: bytes) -> str:
    return hashlib.sha256(first_line).hexdigest()


def sniff(path: Path) -> tuple[bool, bytes]:
    """Check that ``path`` holds OTLP trace lines; return (compressed, its first complete line).

    The file is ours when one of its first lines is a JSON object with ``resourceSpans``. An
    empty file, or one whose only line is still being written, passes with an empty first line.
    """
    compressed = is_gzip(path)
    try:
        head = _lines(path, compressed, _SNIFF_LINES)
    except (OSError, EOFError) as exc:
        raise ForeignFileError(f"{path}: cannot be read as span lines ({exc})") from exc
    complete = [line for line in head if line.endswith(b"\n")]
    if not complete:
        return compressed, b""
    reasons = []
    for line in complete:
        reason = line_problem(line)
        if reason is None:
            return compressed, complete[0]
        reasons.append(reason)
    raise ForeignFileError(
        f"{path}: not OTLP JSON trace lines (first line: {reasons[0]}); nothing was loaded"
    )


def line_problem(line: bytes) -> str | None:
    """Why a line is not an OTLP trace export request, or None when it is one."""
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"malformed JSON: {exc}"
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    if "resourceSpans" not in data:
        keys = ", ".join(sorted(data)[:3]) or "no keys"
        return f"no resourceSpans ({keys})"
    if not isinstance(data["resourceSpans"], list):
        return "resourceSpans is not a list"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Region:
    """What a file holds past an offset (uncompressed bytes)."""

    size: int
    """Where its data ends."""
    end: int
    """Just past its last newline: whole lines stop here."""
    truncated: bool
    """A gzip file whose data stops inside a member (cut, or still being written)."""
    limited: bool = False
    """``end`` stops at the limit asked for: more whole lines follow it."""


def complete_end(path: Path, compressed: bool, offset: int, most: int | None = None) -> Region:
    """How far the whole lines of ``path`` reach past ``offset``; with ``most``, the whole lines
    of the first ``most`` bytes past it (at least one line, however long), for plain files."""
    if compressed:
        with open_span_file(path, compressed, offset) as stream:
            end = size = offset
            while chunk := stream.read(1 << 20):
                size += len(chunk)
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    end = size - len(chunk) + cut + 1
            raw = getattr(stream, "raw", None)
            truncated = isinstance(raw, GzipPrefixReader) and raw.truncated
            return Region(size=max(size, offset), end=end, truncated=truncated)
    size = path.stat().st_size
    if size <= offset:
        return Region(size=size, end=offset, truncated=False)
    if most is not None and size - offset > most:
        with path.open("rb") as f:
            f.seek(offset + most)
            rest = f.readline()  # the end of the line the limit falls in
        if rest.endswith(b"\n"):
            end = offset + most + len(rest)
            return Region(size=size, end=end, truncated=False, limited=end < size)
    with path.open("rb") as f:
        pos = size
        while pos > offset:
            step = min(1 << 16, pos - offset)
            f.seek(pos - step)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                return Region(size=size, end=pos - step + cut + 1, truncated=False)
            pos -= step
    return Region(size=size, end=offset, truncated=False)


def copy_region(path: Path, compressed: bool, start: int, end: int, target: Path) -> None:
    with open_span_file(path, compressed, start) as stream, target.open("wb") as out:
        remaining = end - start
        while remaining > 0:
            chunk = stream.read(min(remaining, 8 << 20))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)


def count_lines(path: Path, compressed: bool, start: int, end: int) -> int:
    lines = 0
    with open_span_file(path, compressed, start) as stream:
        remaining = end - start
        while remaining > 0:
            chunk = stream.read(min(remaining, 8 << 20))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            remaining -= len(chunk)
    return lines
