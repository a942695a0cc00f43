"""Load span files into DuckDB: incremental, idempotent, tolerant of bad lines, strict about others.

The flow of :func:`load`, one file at a time, each file in its own transaction::

    discover_files -> sniff (foreign? fail before writing anything)        [analytics.spanfiles]
      -> _load_file: complete_end (what is new since load_state.offset, whole lines only)
      -> _insert_fast (one parallel INSERT ... SELECT over the file, see analytics.otlp; then
         _drop_repeats removes the spans already stored, looking only where they start)
         or, when that statement hits a malformed line, _insert_tolerant (Python splits the
         region, records bad lines in load_errors, and the good ones go through the fast path)
      -> derive (calls with their session ranks; the stage latency histogram) [analytics.derive]
      -> _save_state: load_state updated in the same transaction as the spans

Files are recognised by a fingerprint of their first line, not by path, so a file that the
collector renamed (``traces.json`` -> ``traces-2026-01-01T00-00-00.000.json``) or compressed
(``.json.gz``) is resumed where it stopped, and a new file at an old path starts from 0. A span
already stored (the same ids and start) is not stored again, so loading the same data twice, from
any file, adds nothing.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from .database import connect
from .derive import derive
from .otlp import parse_sql
from .spanfiles import (
    ForeignFileError,
    complete_end,
    copy_region,
    count_lines,
    discover_files,
    fingerprint,
    line_problem,
    literal_path,
    open_span_file,
    sniff,
)

__all__ = [
    "FileReport",
    "ForeignFileError",
    "LoadReport",
    "Stat",
    "connect",
    "discover_files",
    "load",
    "rollback",
]

_EXCERPT = 200


@dataclass(frozen=True, kw_only=True, slots=True)
class FileReport:
    """What one load did with one file."""

    path: str
    spans: int
    """Spans inserted (duplicates of spans already stored are not counted)."""
    errors: int
    """Lines and spans skipped and recorded in ``load_errors``."""
    bytes: int
    """Uncompressed bytes read this time."""
    truncated: bool = False
    """A gzip file whose data stops mid-stream (cut, or still being written): its whole lines
    were loaded, the rest waits (a file that grows later is resumed from there)."""
    complete: bool = False
    """Everything the file held ends in a newline and is loaded: nothing waits in it."""
    more: bool = False
    """The load stopped at its size limit (``most``): whole lines wait past it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadReport:
    """What one :func:`load` did."""

    files: tuple[FileReport, ...] = field(default_factory=tuple)
    seconds: float = 0.0

    @property
    def spans(self) -> int:
        """Spans inserted, all files."""
        return sum(f.spans for f in self.files)

    @property
    def errors(self) -> int:
        """Lines skipped, all files."""
        return sum(f.errors for f in self.files)

    @property
    def truncated(self) -> tuple[str, ...]:
        """The files whose gzip data was cut."""
        return tuple(f.path for f in self.files if f.truncated)

    @property
    def more(self) -> bool:
        """Some file stopped at the size limit: whole lines wait, load again at once."""
        return any(f.more for f in self.files)

    @property
    def bytes(self) -> int:
        """Uncompressed bytes read, all files."""
        return sum(f.bytes for f in self.files)


@dataclass(kw_only=True, slots=True)
class _State:
    file_id: int
    offset: int
    lines: int | None
    spans: int
    batch: int


def _state(con: duckdb.DuckDBPyConnection, fingerprint: str) -> _State:
    rows = con.execute(
        'SELECT file_id, "offset", lines, spans FROM load_state WHERE fingerprint = ?',
        [fingerprint],
    ).fetchall()
    batch = _scalar(con, "SELECT coalesce(max(value::BIGINT), 0) + 1 FROM meta WHERE key = 'batch'")
    if rows:
        file_id, offset, lines, spans = rows[0]
        return _State(file_id=file_id, offset=offset, lines=lines, spans=spans, batch=batch)
    next_id = _scalar(con, "SELECT coalesce(max(file_id), 0) + 1 FROM load_state")
    return _State(file_id=next_id, offset=0, lines=0, spans=0, batch=batch)


def _scalar(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0])


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _reader(source: Path, gz: bool, longest: int) -> str:
    """``read_ndjson_objects`` over exactly ``source`` (never a glob pattern: see
    :func:`analytics.spanfiles.literal_path`).

    DuckDB's default object limit (16 MiB a line) is kept unless a longer line was seen: a larger
    limit makes every reader thread allocate that much and slows the read 3-4x.
    """
    limit = f", maximum_object_size={1 << max(24, longest.bit_length())}" if longest else ""
    return (
        f"read_ndjson_objects({_sql_string(str(source))}, "
        f"compression={_sql_string('gzip' if gz else 'none')}{limit})"
    )


def _insert_fast(
    con: duckdb.DuckDBPyConnection,
    source: Path,
    state: _State,
    gz: bool,
    longest: int = 0,
) -> int:
    """Insert every span of ``source`` not yet stored; return how many were inserted.

    Raises ``duckdb.InvalidInputException`` on a malformed line or a span the store cannot hold.
    """
    reader = _reader(source, gz, longest)
    con.execute(f"INSERT INTO span_rows {parse_sql(reader, state.file_id, state.batch)}")
    _drop_repeats(con, state.batch, stored=state.batch > 1)
    return _inserted(con, state.batch)


def _insert_checked(
    con: duckdb.DuckDBPyConnection, source: Path, path: Path, state: _State, longest: int
) -> tuple[int, int]:
    """Insert the good spans of ``source`` (lines numbered by the tolerant path); record the
    others in ``load_errors``. Returns (spans inserted, spans rejected)."""
    reader = _reader(source, False, longest)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE parsed AS "
        f"{parse_sql(reader, state.file_id, state.batch, tolerant=True)}"
    )
    rejected = _scalar(con, "SELECT count(*) FROM parsed WHERE problem IS NOT NULL")
    if rejected:
        con.execute(
            "INSERT INTO load_errors SELECT $path, line, 'span: ' || problem, excerpt, $now "
            "FROM parsed WHERE problem IS NOT NULL ORDER BY line",
            {"path": str(path), "now": _now()},
        )
    con.execute(
        "INSERT INTO span_rows SELECT * EXCLUDE (problem, line, excerpt) FROM parsed "
        "WHERE problem IS NULL"
    )
    con.execute("DROP TABLE parsed")
    _drop_repeats(con, state.batch, stored=state.batch > 1)
    return _inserted(con, state.batch), rejected


def _drop_repeats(con: duckdb.DuckDBPyConnection, batch: int, *, stored: bool) -> None:
    """Remove the spans of this load that are already stored, or repeated inside it (a writer
    that retried a batch, the same data in another file): the first copy stays.

    A repeat is the same span: the same ids and the same start. So the stored copies are looked
    for only among spans that start when this load's spans do: the scan reads the row groups of
    that time and skips the others by their min/max, instead of checking every new span against
    every stored one (which made each follow round slower than the last as the database grew).
    """
    new = f"batch = {int(batch)}"
    # Distinct hashes are never more than distinct spans: when there are as many as rows, no
    # span repeats inside the load (counting hashes is half the cost of counting the pairs).
    repeated = _scalar(
        con, f"SELECT count(*) - count(DISTINCT hash(trace_id, span_id)) FROM span_rows WHERE {new}"
    )
    if stored:
        first, last = con.execute(
            f"SELECT min(start_time), max(start_time) FROM span_rows WHERE {new}"
        ).fetchall()[0]
        if first is not None:
            # literals, not parameters: the scan's min/max pruning needs the bounds when planned
            earlier = (
                f"batch < {int(batch)} AND start_time BETWEEN {_sql_timestamp(first)} "
                f"AND {_sql_timestamp(last)}"
            )
            repeated += _scalar(
                con,
                f"SELECT count(*) FROM (SELECT trace_id, span_id, start_time FROM span_rows "
                f"WHERE {new}) AS n SEMI JOIN (SELECT trace_id, span_id, start_time "
                f"FROM span_rows WHERE {earlier}) AS s USING (trace_id, span_id, start_time)",
            )
    if repeated:
        con.execute(
            """
            DELETE FROM span_rows WHERE rowid IN (
                SELECT rowid FROM (
                    SELECT rowid, batch, row_number() OVER (
                        PARTITION BY trace_id, span_id, start_time ORDER BY batch, rowid) AS n
                    FROM span_rows
                    WHERE batch = $batch OR (batch < $batch AND start_time BETWEEN
                        (SELECT min(start_time) FROM span_rows WHERE batch = $batch) AND
                        (SELECT max(start_time) FROM span_rows WHERE batch = $batch))
                ) WHERE n > 1 AND batch = $batch
            )
            """,
            {"batch": batch},
        )


def _sql_timestamp(value: datetime) -> str:
    return f"TIMESTAMP '{value.isoformat(sep=' ')}'"


def _inserted(con: duckdb.DuckDBPyConnection, batch: int) -> int:
    """The spans load ``batch`` stored (a whole-table count(*) inside a writing transaction
    reads every row)."""
    return _scalar(con, f"SELECT count(*) FROM span_rows WHERE batch = {int(batch)}")


def _insert_tolerant(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    compressed: bool,
    state: _State,
    end: int,
    workdir: Path,
) -> tuple[int, int, int]:
    """Split the region into lines in Python; record bad ones; load the good ones.

    Each good line is written with its line number in front (``{"callgate_line":N,...``) so that
    a span the store cannot hold is recorded in ``load_errors`` with the line it came from.
    Returns (spans inserted, lines and spans rejected, lines read in the file so far).
    """
    good = workdir / "good.jsonl"
    first = (
        state.lines if state.lines is not None else count_lines(path, compressed, 0, state.offset)
    )
    errors: list[tuple[str, int, str, str, datetime]] = []
    now = _now()
    lines = 0
    longest = 0
    with open_span_file(path, compressed, state.offset) as stream, good.open("wb") as out:
        position = state.offset
        for line in stream:
            if position >= end:
                break
            position += len(line)
            lines += 1
            if not line.strip():
                continue
            problem = line_problem(line)
            if problem is None:
                numbered = b'{"callgate_line":%d,' % (first + lines) + line.lstrip()[1:]
                out.write(numbered)
                longest = max(longest, len(numbered))
            else:
                excerpt = line[:_EXCERPT].decode("utf-8", "replace").rstrip("\n")
                errors.append((str(path), first + lines, problem, excerpt, now))
    if errors:
        con.executemany("INSERT INTO load_errors VALUES (?, ?, ?, ?, ?)", errors)
    spans, rejected = _insert_checked(con, good, path, state, longest) if longest else (0, 0)
    return spans, len(errors) + rejected, first + lines


def _load_file(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    first_line: bytes,
    compressed: bool,
    most: int | None = None,
) -> FileReport:
    file_key = fingerprint(first_line)
    state = _state(con, file_key)
    region = complete_end(path, compressed, state.offset, most)
    end = region.end
    complete = end == region.size and not region.truncated
    if end <= state.offset:
        return FileReport(
            path=str(path),
            spans=0,
            errors=0,
            bytes=0,
            truncated=region.truncated,
            complete=complete,
        )
    with tempfile.TemporaryDirectory(prefix="callgate-load-") as tmp:
        workdir = Path(tmp)
        direct = state.offset == 0 and end == region.size and not region.truncated
        if direct:
            source = literal_path(path, workdir)
        else:
            source = workdir / "region.jsonl"
            copy_region(path, compressed, state.offset, end, source)
        con.execute("BEGIN TRANSACTION")
        try:
            try:
                spans, errors, lines = (
                    _insert_fast(con, source, state, compressed and direct),
                    0,
                    None,
                )
            except (duckdb.InvalidInputException, duckdb.ConversionException):
                # A malformed line or a span the store cannot hold aborts the statement: redo
                # this file line by line.
                con.execute("ROLLBACK")
                con.execute("BEGIN TRANSACTION")
                spans, errors, lines = _insert_tolerant(con, path, compressed, state, end, workdir)
            derive(con, state.batch)
            _save_state(con, path, file_key, compressed, state, end, lines, spans)
            con.execute("COMMIT")
        except BaseException:
            rollback(con)
            raise
    return FileReport(
        path=str(path),
        spans=spans,
        errors=errors,
        bytes=end - state.offset,
        truncated=region.truncated,
        complete=complete,
        more=region.limited,
    )


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll the file's transaction back, if one is still open: a COMMIT that was interrupted
    (Ctrl-C, ``load --follow`` stopped) has ended it already, and a ROLLBACK then would replace
    the interrupt with "no transaction is active"."""
    with contextlib.suppress(duckdb.TransactionException):
        con.execute("ROLLBACK")


def _save_state(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fingerprint: str,
    compressed: bool,
    state: _State,
    end: int,
    lines: int | None,
    spans: int,
) -> None:
    """Record how far the file was read; ``lines`` is None when they were not counted."""
    con.execute(
        """
        INSERT INTO load_state VALUES ($id, $fp, $path, $gz, $offset, $lines, $spans, $now)
        ON CONFLICT (file_id) DO UPDATE SET
            path = excluded.path, compressed = excluded.compressed, "offset" = excluded."offset",
            lines = excluded.lines, spans = excluded.spans, loaded_at = excluded.loaded_at
        """,
        {
            "id": state.file_id,
            "fp": fingerprint,
            "path": str(path),
            "gz": compressed,
            "offset": end,
            "lines": lines,
            "spans": state.spans + spans,
            "now": _now(),
        },
    )
    con.execute("INSERT OR REPLACE INTO meta VALUES ('batch', ?)", [str(state.batch)])


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


Stat = tuple[int, int, int, int]
"""A file's device, inode, size and modification time: the same four, the same bytes."""


def _stat(path: Path) -> Stat | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def load(
    con: duckdb.DuckDBPyConnection,
    paths: Sequence[str | os.PathLike[str]],
    *,
    read_to_end: dict[Path, Stat] | None = None,
    most: int | None = None,
) -> LoadReport:
    """Load what is new in the span files behind ``paths`` (see :func:`discover_files`).

    Every file is checked before anything is written: if one is not OTLP JSON trace lines,
    :class:`ForeignFileError` is raised and the database is left as it was. Then each file loads
    in its own transaction, so a crash leaves whole files or nothing, and offsets always match
    the spans stored.

    ``read_to_end`` (what :func:`follow` keeps between rounds) maps files this database holds to
    their last line to how they looked before that read; a file that still looks the same is
    skipped without being opened, and files read to the end this time are added. Without it a
    follow round re-read the head of every rotated file, a cost that grew with the run.
    ``most`` caps the bytes read from a file in this load (whole lines; :attr:`LoadReport.more`
    says when some wait): a follow round that fell behind stays small in memory and time.
    """
    started = time.perf_counter()
    seen = {} if read_to_end is None else read_to_end
    files = [
        path for path in discover_files(paths) if path not in seen or _stat(path) != seen[path]
    ]
    stats = {path: _stat(path) for path in files}
    sniffed = [(path, *sniff(path)) for path in files]
    # Inserting without keeping row order lets DuckDB use both cores end to end; the caller's
    # setting is put back afterwards.
    preserve = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = false")
    reports = []
    try:
        for path, compressed, first_line in sniffed:
            if not first_line:
                continue
            report = _load_file(con, path, first_line, compressed, most)
            reports.append(report)
            stat = stats[path]
            if report.complete and stat is not None:
                seen[path] = stat
            else:
                seen.pop(path, None)
    finally:
        con.execute(f"SET preserve_insertion_order = {'true' if preserve else 'false'}")
    return LoadReport(files=tuple(reports), seconds=time.perf_counter() - started)
