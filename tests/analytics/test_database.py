"""Opening a callgate database: one context manager, clear errors, one lock-wait deadline."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from analytics.database import (
    DatabaseBusyError,
    NoDatabaseError,
    NotADatabaseError,
    connect,
    open_database,
)


class TestOpenDatabase:
    def test_creates_and_closes(self, tmp_path):
        """A read-write open creates the schema; the connection is closed after the block."""
        with open_database(tmp_path / "new.duckdb", read_only=False) as con:
            assert con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
        with pytest.raises(duckdb.ConnectionException):
            con.execute("SELECT 1")

    def test_read_only_never_creates(self, tmp_path):
        """A read-only open of a missing file says to load first and creates nothing."""
        with pytest.raises(NoDatabaseError, match="callgate load"):
            connect(tmp_path / "none.duckdb", read_only=True)
        assert not (tmp_path / "none.duckdb").exists()

    def test_not_duckdb(self, tmp_path):
        """A text file is named as not a DuckDB database, for reads and for writes."""
        path = tmp_path / "README.md"
        path.write_text("# hello\n")
        for read_only in (True, False):
            with pytest.raises(NotADatabaseError, match="not a DuckDB database"):
                connect(path, read_only=read_only)
        assert path.read_text() == "# hello\n"

    def test_someone_elses_duckdb_is_left_alone(self, tmp_path):
        """A DuckDB file without callgate's tables is refused and not written to."""
        path = tmp_path / "other.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE orders (id INTEGER)")
        con.close()
        for read_only in (True, False):
            with pytest.raises(NotADatabaseError, match=r"not callgate's .*orders"):
                connect(path, read_only=read_only)
        con = duckdb.connect(str(path), read_only=True)
        tables = con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        con.close()
        assert tables == [("orders",)]

    def test_busy_fails_after_one_timeout(self, tmp_path):
        """A lock held by another process ends in DatabaseBusyError after the timeout, once."""
        path = tmp_path / "held.duckdb"
        connect(path).close()
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(
                    f"""
                    import duckdb, sys, time
                    con = duckdb.connect({str(path)!r})
                    print("held", flush=True)
                    time.sleep(30)
                    """
                ),
            ],
            stdout=subprocess.PIPE,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
            started = time.monotonic()
            with pytest.raises(DatabaseBusyError, match="busy"):
                connect(path, read_only=True, timeout=0.5)
            assert 0.4 < time.monotonic() - started < 5
        finally:
            holder.kill()
            holder.wait()
            holder.stdout.close()

    def test_path_objects_and_strings_both_work(self, tmp_path: Path) -> None:
        """Paths may be str or PathLike."""
        with open_database(str(tmp_path / "a.duckdb"), read_only=False):
            pass
        with open_database(tmp_path / "a.duckdb") as con:
            assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
