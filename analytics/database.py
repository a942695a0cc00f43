"""Opening a callgate database: the one way the CLI, the dashboard and the demo do it.

:func:`open_database` is a context manager: it checks the file (present, DuckDB, callgate's),
opens it with a single lock-wait deadline, and closes it on exit. :func:`connect` is the same open
without the ``with`` (for long-lived connections and the tests). Problems a person can act on are
:class:`DatabaseError` subclasses with a message that says what to do, never a DuckDB traceback::

    DatabaseError
     +-- NoDatabaseError       the file does not exist (read-only opens only)
     +-- NotADatabaseError     not a DuckDB file, or a DuckDB file that is not callgate's
     +-- DatabaseBusyError     another process held the lock for the whole timeout

DuckDB lets one process hold a database file at a time. Writers (``load``) hold it only for one
load round; readers (``report``, the dashboard) open it ``read_only`` for one query or page. A
database that ``load --follow`` keeps is a link to the copy it is not writing
(:mod:`analytics.follow`), so readers of it do not meet the writer at all. When
the other side holds the file, opening retries until ``timeout`` seconds have passed, once: callers
never stack retries of their own on top (that made a dashboard page wait 100 s).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from .schema import DDL, SCHEMA_VERSION

__all__ = [
    "DEFAULT_DB",
    "DatabaseBusyError",
    "DatabaseError",
    "NoDatabaseError",
    "NotADatabaseError",
    "connect",
    "default_path",
    "open_database",
]

DEFAULT_DB = "callgate.duckdb"
"""The file ``callgate load`` writes and every reader opens when not told otherwise."""


class DatabaseError(Exception):
    """The database cannot be used; the message says why and what to do."""


class NoDatabaseError(DatabaseError):
    """No file at the path (read-only opens never create one)."""


class NotADatabaseError(DatabaseError):
    """The file is not DuckDB, or is a DuckDB database callgate did not create."""


class DatabaseBusyError(DatabaseError):
    """Another process held the file's lock for the whole timeout."""


def connect(
    database: str | os.PathLike[str] = ":memory:",
    *,
    read_only: bool = False,
    timeout: float = 10.0,
) -> duckdb.DuckDBPyConnection:
    """Open (and, read-write, create or upgrade) a callgate database; the caller closes it.

    Raises :class:`DatabaseError` for a missing file (read-only), a foreign file, or a lock held
    longer than ``timeout`` seconds.
    """
    path = os.fspath(database)
    memory = path == ":memory:"
    if read_only and not memory and not os.path.exists(path):
        raise NoDatabaseError(
            f"no database at {path}: run `callgate load PATH... --db {path}` first"
        )
    con = _connect_waiting(path, read_only, timeout)
    try:
        con.execute("SET enable_progress_bar = false")
        _check_ours(con, path)
        if not read_only:
            for statement in DDL:
                con.execute(statement)
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
            )
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def open_database(
    database: str | os.PathLike[str] = DEFAULT_DB,
    *,
    read_only: bool = True,
    timeout: float = 10.0,
) -> Iterator[duckdb.DuckDBPyConnection]:
    """``with open_database(path) as con:`` a checked connection, closed on exit (see :func:`connect`).

    Read-only by default: that is what every reader wants, and it lets a writer in between.
    """
    con = connect(database, read_only=read_only, timeout=timeout)
    try:
        yield con
    finally:
        con.close()


def _connect_waiting(path: str, read_only: bool, timeout: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        # A followed database is a link to the copy no one writes (analytics.follow): open that
        # copy, and when the link moved on while this open was refused, try the new one at once.
        target = os.path.realpath(path) if path != ":memory:" else path
        try:
            return duckdb.connect(target, read_only=read_only)
        except duckdb.IOException as exc:
            message = str(exc)
            if "not a valid DuckDB database" in message:
                raise NotADatabaseError(
                    f"{path} is not a DuckDB database: give the file `callgate load` wrote "
                    "(--db or $CALLGATE_DB)"
                ) from exc
            if "lock" not in message.lower():
                raise DatabaseError(f"cannot open {path}: {_first_line(exc)}") from exc
            if os.path.realpath(path) != target:
                continue
            if time.monotonic() >= deadline:
                raise DatabaseBusyError(
                    f"{path} is busy: another process holds it ({_first_line(exc)}); "
                    "try again once it is done"
                ) from exc
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.25)
        except duckdb.Error as exc:
            raise DatabaseError(f"cannot open {path}: {_first_line(exc)}") from exc


def _check_ours(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """Refuse a DuckDB database that has tables but not callgate's ``meta`` and ``spans``: reading
    it would fail on a missing table, and writing would add callgate's tables to someone else's."""
    tables = {
        name
        for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()
    }
    if tables and not {"meta", "spans"} <= tables:
        shown = ", ".join(sorted(tables)[:3]) + (", ..." if len(tables) > 3 else "")
        raise NotADatabaseError(
            f"{path} is a DuckDB database but not callgate's (it has {shown}): give the file "
            "`callgate load` wrote (--db or $CALLGATE_DB)"
        )
    if "meta" in tables:
        found = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        if found and found[0][0] != str(SCHEMA_VERSION):
            raise NotADatabaseError(
                f"{path} was written by another callgate version (schema {found[0][0]}, this "
                f"one reads {SCHEMA_VERSION}): load the span files into a new database"
            )
    if not tables and con.execute("SELECT current_setting('access_mode')").fetchall()[0][0] == (
        "read_only"
    ):
        raise NotADatabaseError(
            f"{path} is an empty DuckDB database, not one `callgate load` wrote: load span files "
            "into it first"
        )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def default_path() -> Path:
    """``$CALLGATE_DB``, or :data:`DEFAULT_DB` in the working directory."""
    return Path(os.environ.get("CALLGATE_DB") or DEFAULT_DB)
