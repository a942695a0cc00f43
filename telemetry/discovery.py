"""The span files behind the paths a command is given: one answer for every reader of the trail.

``callgate load`` and ``callgate verify`` both ask :func:`discover_files`, so a file the loader
reads is a file the verifier checks (a ``.ndjson`` beside the ``.jsonl`` files, a rotated backup
beside the file named). It lives in ``telemetry`` because analytics may import telemetry and not
the other way round.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["SPAN_FILE_SUFFIXES", "discover_files"]

SPAN_FILE_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")
"""The names a directory's span files end with."""


def discover_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The span files behind ``paths``, oldest first, rotated siblings included.

    A directory means every span file in it. A file ``traces.json`` also brings in the files its
    rotation made: ``traces-*.json`` and ``traces-*.json.gz`` (the collector's file exporter names
    backups ``<name>-<timestamp><ext>``), ordered by modification time so older data loads first.
    Raises ``FileNotFoundError`` for a named file that is not there and has no rotated sibling.
    """
    found: dict[Path, None] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = [
                p for p in path.iterdir() if p.is_file() and p.name.endswith(SPAN_FILE_SUFFIXES)
            ]
        else:
            stem, ext = _split_name(path.name)
            pattern = f"{glob.escape(stem)}-*{glob.escape(ext)}*"  # the name itself is literal
            siblings = path.parent.glob(pattern) if path.parent.is_dir() else []
            rotated = [p for p in siblings if p.name.endswith((ext, ext + ".gz"))]
            candidates = [*rotated, path] if path.exists() else rotated
            if not path.exists() and not rotated:
                raise FileNotFoundError(f"no such span file: {path}")
        for p in sorted(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name)):
            found.setdefault(p, None)
    return list(found)


def _split_name(name: str) -> tuple[str, str]:
    for suffix in sorted(SPAN_FILE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix.removesuffix(".gz")
    stem, dot, ext = name.rpartition(".")
    return (stem, dot + ext) if stem else (name, "")
