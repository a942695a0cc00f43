"""What every SQLite store shares: per-thread connections to one file, the schema, transactions.

A sqlite3 connection must not be used by two threads at once, so each thread gets its own,
opened lazily. Those of ended threads are closed when a new one opens, and ``close()`` closes the
rest; ``check_same_thread=False`` only lets that close run on another thread, never concurrently
with use.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import ClassVar, Literal, Self

__all__ = ["SQLiteStoreBase", "Synchronous"]

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
    ) -> None:
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"unknown synchronous mode {synchronous!r}")
        self._path = os.fspath(path)
        if self._path in ("", ":memory:"):
            # Each per-thread connection would get its own private, empty database.
            raise ValueError("SQLite stores need a file path, not an in-memory database")
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
        except BaseException:
            self.close()
            raise

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
