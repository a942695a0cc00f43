"""Opening the data source for one render: a DuckDB file read-only, or ClickHouse.

A DuckDB file is opened at the start of a render and closed at its end, never held between
renders: a read-only handle takes a shared lock on the file, and the writer (``callgate load
--follow`` or the sidecar) needs it back to append. When the writer holds the lock, opening is
retried briefly; if it still fails the page says so and the next auto-refresh tries again.

Problems the user can act on (no source given, no file yet, not a DuckDB file, not a callgate
database, locked) come back as :class:`Unavailable` values with a message, never as tracebacks.
A file that is not DuckDB at all is named as such before any lock is retried: it is never "busy".
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb

from analytics import clickhouse, database, metrics

from .safe import text
from .settings import Settings

__all__ = ["Source", "Unavailable", "open_source", "source_errors"]

Source = metrics.Source
"""What analytics' query functions take: a DuckDB connection or a metrics Backend."""

_LOCK_WAIT_S = 1.0
"""How long a render waits for a writer to let go of the file (one deadline, no retries on top)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Unavailable:
    """Why there is nothing to show, in words for the person looking at the page.

    Both are Markdown source: paths and error messages in them are code spans (:func:`safe.text`).
    """

    title: str
    detail: str


@contextmanager
def open_source(settings: Settings) -> Iterator[Source | Unavailable]:
    """Yield a source for analytics' query functions, or why there is none; close it after."""
    if settings.clickhouse:
        yield _clickhouse(settings.clickhouse)
        return
    if not settings.db:
        yield Unavailable(
            title="No data source",
            detail="Start the dashboard with `callgate dashboard --db FILE` "
            "or `callgate dashboard --clickhouse URL`.",
        )
        return
    opened = _open_duckdb(Path(settings.db))
    if isinstance(opened, Unavailable):
        yield opened
        return
    try:
        yield opened
    finally:
        opened.close()


_DUCKDB_MAGIC = b"DUCK"
"""Bytes 8-11 of every DuckDB database file."""


def is_duckdb_file(path: Path) -> bool:
    """The file starts with DuckDB's header (an empty file counts: DuckDB can start it)."""
    try:
        with path.open("rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return not head or head[8:12] == _DUCKDB_MAGIC


def _open_duckdb(path: Path) -> duckdb.DuckDBPyConnection | Unavailable:
    if path.exists() and (path.is_dir() or not is_duckdb_file(path)):
        return Unavailable(
            title=f"{text(path)} is not a DuckDB file",
            detail="Point the dashboard at the database `callgate load PATH... --db FILE` "
            "writes, not at a span file or another kind of file.",
        )
    try:
        return database.connect(path, read_only=True, timeout=_LOCK_WAIT_S)
    except database.NoDatabaseError:
        return Unavailable(
            title=f"No database at {text(path)}",
            detail=f"Load span files into it first: {text(f'callgate load PATH... --db {path}')}. "
            "This page checks again at every refresh.",
        )
    except database.NotADatabaseError as exc:
        return Unavailable(title="Not a callgate database", detail=text(exc))
    except database.DatabaseBusyError as exc:
        return Unavailable(
            title=f"{text(path)} is busy", detail=f"{text(exc)}. The next refresh tries again."
        )
    except database.DatabaseError as exc:
        return Unavailable(title=f"Cannot open {text(path)}", detail=text(exc))


def _clickhouse(url: str) -> Source | Unavailable:
    shown = Settings(clickhouse=url).describe()
    try:
        return connect_clickhouse(url)
    except RuntimeError as exc:  # clickhouse-connect is not installed
        return Unavailable(title=f"Cannot read {text(shown)}", detail=text(_first_line(exc)))
    except source_errors() as exc:
        return Unavailable(title=f"Cannot reach {text(shown)}", detail=text(_first_line(exc)))


def connect_clickhouse(url: str) -> metrics.Backend:
    """A metrics backend for a ClickHouse URL (the seam the tests replace with chDB)."""
    return clickhouse.connect_url(url)


def source_errors() -> tuple[type[Exception], ...]:
    """Errors a source raises for reasons outside the dashboard: shown as messages, not tracebacks.

    DuckDB's, network errors, and clickhouse-connect's when it is installed.
    """
    errors: list[type[Exception]] = [duckdb.Error, OSError]
    try:
        from clickhouse_connect.driver.exceptions import (  # type: ignore[import-not-found, unused-ignore]
            ClickHouseError,
        )
    except ImportError:
        pass
    else:
        errors.append(ClickHouseError)
    return tuple(errors)


def _first_line(error: BaseException | None) -> str:
    return str(error).strip().splitlines()[0] if error else "unknown error"
