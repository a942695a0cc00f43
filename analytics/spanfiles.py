"""Span files on disk: finding them (rotations included), recognising them, reading new lines.

A span file is OTLP JSON lines, plain or gzip. It is recognised by the SHA-256 of its first line
(:func:`fingerprint`), which a rename or a later gzip does not change; :func:`sniff` refuses files
that are not trace lines before anything is written.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "ForeignFileError",
    "complete_end",
    "copy_region",
    "count_lines",
    "discover_files",
    "fingerprint",
    "is_gzip",
    "line_problem",
    "open_span_file",
    "read_gzip",
    "sniff",
]

_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
_SNIFF_LINES = 20


class ForeignFileError(ValueError):
    """The file is not OTLP JSON trace lines; nothing was loaded from any file."""


def discover_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The span files behind ``paths``, oldest first, rotated siblings included.

    A directory means every span file in it. A file ``traces.json`` also brings in the files its
    rotation made: ``traces-*.json`` and ``traces-*.json.gz`` (the collector's file exporter names
    backups ``<name>-<timestamp><ext>``), ordered by modification time so older data loads first.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = [p for p in path.iterdir() if p.is_file() and p.name.endswith(_SUFFIXES)]
        else:
            stem, ext = _split_name(path.name)
            siblings = path.parent.glob(f"{stem}-*{ext}*") if path.parent.is_dir() else []
            rotated = [p for p in siblings if p.name.endswith((ext, ext + ".gz"))]
            candidates = [*rotated, path] if path.exists() else rotated
            if not path.exists() and not rotated:
                raise FileNotFoundError(f"no such span file: {path}")
        for p in sorted(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name)):
            found.setdefault(p, None)
    return list(found)


def _split_name(name: str) -> tuple[str, str]:
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix.removesuffix(".gz")
    stem, dot, ext = name.rpartition(".")
    return (stem, dot + ext) if stem else (name, "")


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


@contextmanager
def open_span_file(path: Path, compressed: bool) -> Iterator[io.BufferedIOBase]:
    stream: io.BufferedIOBase = gzip.open(path, "rb") if compressed else path.open("rb")  # noqa: SIM115
    try:
        yield stream
    finally:
        stream.close()


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


def complete_end(path: Path, compressed: bool, offset: int) -> tuple[int, int]:
    """(size, end): the uncompressed size, and the offset just past its last newline."""
    if compressed:
        with gzip.open(path, "rb") as stream:
            stream.seek(offset)
            end = offset
            size = offset
            while chunk := read_gzip(stream, 1 << 20):
                size += len(chunk)
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    end = size - len(chunk) + cut + 1
            return size, end
    size = path.stat().st_size
    if size <= offset:
        return size, offset
    with path.open("rb") as f:
        pos = size
        while pos > offset:
            step = min(1 << 16, pos - offset)
            f.seek(pos - step)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n")
            if cut >= 0:
                return size, pos - step + cut + 1
            pos -= step
    return size, offset


def read_gzip(stream: gzip.GzipFile, n: int) -> bytes:
    """Read from a gzip stream; a stream still being written ends where its data ends."""
    try:
        return stream.read(n)
    except EOFError:
        return b""


def copy_region(path: Path, compressed: bool, start: int, end: int, target: Path) -> None:
    with open_span_file(path, compressed) as stream, target.open("wb") as out:
        stream.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = stream.read(min(remaining, 8 << 20))
            if not chunk:
                break
            out.write(chunk)
            remaining -= len(chunk)


def count_lines(path: Path, compressed: bool, start: int, end: int) -> int:
    lines = 0
    with open_span_file(path, compressed) as stream:
        stream.seek(start)
        remaining = end - start
        while remaining > 0:
            chunk = stream.read(min(remaining, 8 << 20))
            if not chunk:
                break
            lines += chunk.count(b"\n")
            remaining -= len(chunk)
    return lines
