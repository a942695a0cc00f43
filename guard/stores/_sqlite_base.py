"""What every SQLite store shares: per-thread connections to one file, the schema, transactions.

A sqlite3 connection must not be used by two threads at once, so each thread gets its own,
opened lazily. Those of ended threads are closed when a new one opens, and ``close()`` closes the
rest; ``check_same_thread=False`` only lets that close run on another thread, never concurrently
with use.

The file holds approvals with their exact arguments and the claims that keep writes exactly-once,
so it is created readable and writable by its owner only (0600; SQLite gives its ``-wal`` and
``-shm`` files the same mode), and a file (or journal) that the group or others may write is
refused unless the host passes ``allow_writable_file=True``: whoever can write it can approve.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import ClassVar, Literal, Self

__all__ = ["SQLiteStoreBase", "Synchronous", "private_file"]

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
"""SQLite's ``synchronous`` pragma: how often commits are fsynced."""


class SQLiteStoreBase:
    """Per-thread connections to one file, the schema, and the transaction helper."""

    _DDL: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        synchronous: Synchronous = "NORMAL",
        allow_writable_file: bool = False,
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"unknown synchronous mode {synchronous!r}")
        self._path = os.fspath(path)
        if self._path in ("", ":memory:"):
            # Each per-thread connection would get its own private, empty database.
            raise ValueError("SQLite stores need a file path, not an in-memory database")
        private_file(self._path, allow_writable=allow_writable_file)
        self._busy_timeout = busy_timeout
        # NORMAL in WAL mode survives any process crash; only an OS crash or power cut can lose
        # the last commits. Hosts that need more pass "FULL" (an fsync per commit).
        self._synchronous = synchronous
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._closed = False
        try:
            self._enable_wal()
            with self._immediate() as conn:
                for statement in self._DDL:
                    conn.execute(statement)
                self._migrate(conn)
        except BaseException:
            self.close()
            raise

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Bring a table made by an older version up to date (inside the schema transaction)."""

    def close(self) -> None:
        """Close every connection this store opened; using the store afterwards raises."""
        with self._lock:
            self._closed = True
            for _, conn in self._connections:
                conn.close()
            self._connections.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _enable_wal(self) -> None:
        """Switch the file to WAL (a persistent setting), retrying while another opener does.

        Changing the journal mode fails with SQLITE_BUSY at once, without the busy handler, when
        another process is changing it too: two stores opening a new file together hit this.
        """
        conn = self._conn()
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as err:
                # The low byte is the primary code, whichever extended BUSY variant this is.
                busy = err.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed store.")
            # A server with a thread per request would otherwise keep one connection per request.
            live = []
            for thread, conn in self._connections:
                if thread.is_alive():
                    live.append((thread, conn))
                else:
                    conn.close()
            # isolation_level=None: no implicit transactions; we BEGIN IMMEDIATE where it matters.
            conn = sqlite3.connect(
                self._path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            live.append((threading.current_thread(), conn))
            self._connections = live
            return conn

    @contextmanager
    def _immediate(self) -> Iterator[sqlite3.Connection]:
        """A transaction holding the write lock from its first read, committed on success."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def private_file(path: str, *, allow_writable: bool) -> None:
    """Create ``path`` as an empty file only its owner may read and write, or check the one there.

    An empty file is a valid, empty SQLite database. The mode is set by ``os.open`` at creation
    (narrowed further by the umask), so the file is never readable by others, not even briefly.
    Raises ``PermissionError`` for an existing file, ``-wal`` or ``-shm`` that the group or others
    may write, unless ``allow_writable``.
    """
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return
    except FileExistsError:
        pass
    if allow_writable:
        return
    for name in (path, path + "-wal", path + "-shm"):
        try:
            mode = os.stat(name).st_mode
        except FileNotFoundError:
            continue
        if mode & _OTHERS_WRITE:
            raise PermissionError(
                f"{name} may be written by its group or others (mode {stat.S_IMODE(mode):04o}): "
                "whoever can write the store can approve actions and change what they run. "
                f"chmod 600 {name}, or pass allow_writable_file=True (--allow-writable-store)"
            )
