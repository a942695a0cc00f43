"""``callgate load --follow``: keep a database fresh while readers use it, without making them wait.

DuckDB lets one process write a file and no other process read it meanwhile, so a loader that
writes the file readers open makes every reader that comes during a round wait for it. The
follower therefore keeps two copies beside the database, ``<db>.a`` and ``<db>.b``, and makes
``<db>`` a symbolic link to the one readers should open::

    round n:   load what is new into the copy readers do not use -> point <db> at it
    round n+1: the same into the other copy (it catches up on two rounds) -> point <db> at it

Readers open the copy the link names, which no one is writing; the follower may wait for a reader
still holding the copy it is about to write (one that opened it before the last switch), never the
other way round. Each copy catches up from the span files by its own ``load_state`` offsets, so
both hold the same data a round apart. The price: disk for two copies, and the CPU of loading
every span twice.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .database import DatabaseBusyError, connect
from .load import LoadReport, Stat, load

__all__ = ["ROUND_BYTES", "copies", "follow", "prepare", "served"]

ROUND_BYTES = 32 << 20
"""At most this many bytes of one file per round (whole lines): a follower that fell behind
catches up in rounds of bounded memory and time instead of one huge round."""

_SUFFIXES = (".a", ".b")


def copies(database: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The two copies behind a followed database: ``<db>.a`` and ``<db>.b``."""
    path = Path(database)
    first, second = (path.with_name(path.name + suffix) for suffix in _SUFFIXES)
    return first, second


def served(database: str | os.PathLike[str]) -> Path:
    """The copy readers open now (the link's target), or the file itself when it is no link."""
    path = Path(database)
    if not path.is_symlink():
        return path
    return path.parent / os.readlink(path)


def _point(database: Path, copy: Path) -> None:
    """Make ``database`` a link to ``copy`` in one step: a reader sees the old copy or the new."""
    link = database.with_name(f".{database.name}.link-{os.getpid()}")
    link.unlink(missing_ok=True)
    os.symlink(copy.name, link)
    os.replace(link, database)


def prepare(database: str | os.PathLike[str]) -> None:
    """Set up the two copies once: a database that exists becomes the first (the same file, so
    readers that have it open keep reading), the second is a copy of it; a new one starts empty."""
    path = Path(database)
    first, second = copies(path)
    if path.is_symlink():
        current = served(path)
        other = second if current == first else first
        if not other.exists():
            shutil.copyfile(current, other)
        return
    if path.exists():
        connect(path).close()  # checkpointed: everything is in the file, no WAL beside it
        first.unlink(missing_ok=True)
        os.link(path, first)
    else:
        connect(first).close()
    second.unlink(missing_ok=True)
    shutil.copyfile(first, second)
    _point(path, first)


def follow(
    database: str | os.PathLike[str],
    paths: Sequence[str | os.PathLike[str]],
    *,
    interval: float = 1.0,
    on_load: Callable[[LoadReport], None] = lambda report: None,
    should_stop: Callable[[], bool] = lambda: False,
    round_bytes: int = ROUND_BYTES,
) -> None:
    """Keep loading ``paths`` into ``database`` every ``interval`` seconds until ``should_stop()``.

    Each round loads what is new (rotations included) into the copy readers are not using, then
    points ``database`` at it (see the module). Rounds start every ``interval`` seconds; a round
    that took longer, or stopped at ``round_bytes`` of a file, is followed at once. A round that
    finds its copy busy (a reader held it for the whole wait) is skipped, not fatal.

    Every span is loaded into both copies; ``on_load`` hears each once, from the first copy's
    rounds.
    """
    path = Path(database)
    prepare(path)
    first, second = copies(path)
    read_to_end: dict[Path, dict[Path, Stat]] = {first: {}, second: {}}
    while not should_stop():
        started = time.monotonic()
        target = second if served(path) == first else first
        try:
            con = connect(target)
        except DatabaseBusyError:
            time.sleep(interval)
            continue
        try:
            report = load(con, paths, read_to_end=read_to_end[target], most=round_bytes)
        finally:
            con.close()
        _point(path, target)
        if target == first and (report.spans or report.errors):
            on_load(report)
        if should_stop():
            break
        if not report.more:
            time.sleep(max(0.0, started + interval - time.monotonic()))
