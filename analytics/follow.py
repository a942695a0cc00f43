"""``callgate load --follow``: keep a database fresh while readers use it, without making them wait.

DuckDB lets one process write a file and no other process read it meanwhile, so a loader that
writes the file readers open makes every reader that comes during a round wait for it. The
follower therefore keeps two copies beside the database, ``<db>.a`` and ``<db>.b``, and makes
``<db>`` a symbolic link to the one readers should open::

    round n:   copy a (readers use b): catch up on b's last round, load what is new -> <db> = a
    round n+1: copy b (readers use a): catch up on a's last round, load what is new -> <db> = b

Readers open the copy the link names, which no one is writing; the follower may wait for a reader
still holding the copy it is about to write (one that opened it before the last switch), never the
other way round.

Each span's JSON is parsed once, into whichever copy is written when it arrives. The other copy
catches up at its next round by reading the stored rows of the batches it lacks from the copy
readers use (attached read-only, beside the readers), and deriving ``calls`` and the histograms
from them as the first copy did (:func:`catch_up`). Parsing was most of a round's cost, and a
follower that parsed every span into both copies fell behind at 20,000 spans/s.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb

from .database import DatabaseBusyError, connect
from .derive import derive_calls
from .load import LoadReport, Stat, load, rollback

__all__ = ["ROUND_BYTES", "catch_up", "copies", "follow", "prepare", "served"]

ROUND_BYTES = 8 << 20
"""At most this many bytes of one file per round (whole lines): a follower that fell behind
catches up in rounds of bounded memory and time instead of one huge round. Parsing a region
takes about 8 times its size in memory: at 32 MiB the follower's peak RSS was 436 MiB, at 8 MiB
237 MiB (the same rounds, one process)."""

_SUFFIXES = (".a", ".b")

_COPIED = ("stage_latency_hist", "stage_latency_all")
"""Derived tables whose rows name the load that wrote them: copied as they are. ``calls`` is
derived again instead: a load also rewrites some earlier loads' calls (their ``seq``), and
nothing in a row says which."""


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


def _last_batch(con: duckdb.DuckDBPyConnection, schema: str) -> int:
    row = con.execute(
        f"SELECT coalesce(max(value::BIGINT), 0) FROM {schema}.meta WHERE key = 'batch'"
    ).fetchall()
    return int(row[0][0])


def catch_up(con: duckdb.DuckDBPyConnection, other: str | os.PathLike[str]) -> int:
    """Bring ``con``'s database up to ``other``, a copy that holds the same loads and more: the
    span rows and histogram rows of each batch it lacks are copied, ``calls`` derived from them
    batch by batch (as the load that made them did), and the load state, errors and meta taken
    over. One transaction. Returns the number of batches copied.

    ``other`` is attached read-only, so readers that have it open go on reading it.
    """
    quoted = "'" + os.fspath(other).replace("'", "''") + "'"
    con.execute(f"ATTACH {quoted} AS other (READ_ONLY)")
    try:
        mine, theirs = _last_batch(con, "main"), _last_batch(con, "other")
        if theirs <= mine:
            return 0
        since = con.execute("SELECT max(loaded_at) FROM load_errors").fetchall()[0][0]
        con.execute("BEGIN TRANSACTION")
        try:
            for batch in range(mine + 1, theirs + 1):
                # batch is a literal, so the scan skips the row groups of other batches
                for table in ("span_rows", *_COPIED):
                    con.execute(
                        f"INSERT INTO {table} SELECT * FROM other.{table} WHERE batch = {batch}"
                    )
                derive_calls(con, batch)
            # Errors have no batch: the ones since this copy's last are the other's minus its own.
            con.execute(
                "INSERT INTO load_errors SELECT * FROM other.load_errors "
                "WHERE $since IS NULL OR loaded_at >= $since EXCEPT ALL "
                "SELECT * FROM load_errors WHERE $since IS NULL OR loaded_at >= $since",
                {"since": since},
            )
            con.execute(
                """
                INSERT INTO load_state SELECT * FROM other.load_state
                ON CONFLICT (file_id) DO UPDATE SET
                    path = excluded.path, compressed = excluded.compressed,
                    "offset" = excluded."offset", lines = excluded.lines,
                    spans = excluded.spans, loaded_at = excluded.loaded_at
                """
            )
            con.execute("INSERT OR REPLACE INTO meta SELECT * FROM other.meta")
            con.execute("COMMIT")
        except BaseException:
            rollback(con)
            raise
        return theirs - mine
    finally:
        con.execute("DETACH other")


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

    Each round brings the copy readers are not using up to the one they use (:func:`catch_up`),
    loads what is new into it (rotations included), then points ``database`` at it (see the
    module). Rounds start every ``interval`` seconds; a round that took longer, or stopped at
    ``round_bytes`` of a file, is followed at once. A round that finds its copy busy (a reader
    held it for the whole wait) is skipped, not fatal. ``on_load`` hears each round's load.
    """
    path = Path(database)
    prepare(path)
    first, second = copies(path)
    # Both copies hold the same files once caught up, so what was read to the end is shared.
    read_to_end: dict[Path, Stat] = {}
    while not should_stop():
        started = time.monotonic()
        other = served(path)
        target = second if other == first else first
        try:
            con = connect(target)
        except DatabaseBusyError:
            time.sleep(interval)
            continue
        try:
            catch_up(con, other)
            report = load(con, paths, read_to_end=read_to_end, most=round_bytes)
        except RuntimeError as exc:
            # DuckDB reports a Ctrl-C that came during a statement as this (the round's
            # transaction is rolled back): the caller sees the interrupt, not a traceback.
            if str(exc) == "Query interrupted":
                raise KeyboardInterrupt from exc
            raise
        finally:
            con.close()
        _point(path, target)
        if report.spans or report.errors:
            on_load(report)
        if should_stop():
            break
        if not report.more:
            time.sleep(max(0.0, started + interval - time.monotonic()))
