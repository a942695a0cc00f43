"""Following growing span files: each round derives what a bulk load would, reads only near its
new spans, and never makes a reader wait."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.follow import catch_up, copies, follow, prepare, served
from analytics.load import LoadReport, connect, load
from analytics.schema import DDL
from analytics.synth import Call, encode_request, generate, spans_of
from telemetry.records import SpanRecord

_ROOT = Path(__file__).resolve().parents[2]
_FOLLOW = importlib.import_module("analytics.follow")  # ``analytics.follow`` names the function


def _calls(spans: int, *, seed: int, long_every: int = 3) -> list[Call]:
    """Synthetic calls in time order; every ``long_every``-th belongs to one long session."""
    calls = list(generate(spans=spans, seed=seed))
    return [
        dataclasses.replace(c, session="s-long") if i % long_every == 0 else c
        for i, c in enumerate(calls)
    ]


def _append(path: Path, records: Sequence[SpanRecord]) -> None:
    """Append ``records`` as lines of at most 64 spans (as a trail writes them)."""
    with path.open("a") as out:
        for start in range(0, len(records), 64):
            out.write(encode_request(records[start : start + 64], "svc") + "\n")


def _tables(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's content, without what says which load wrote a row; the histograms summed
    (a follow round may store a count as several rows, corrections included)."""
    return {
        "span_rows": con.execute(
            "SELECT * EXCLUDE (file_id, batch) FROM span_rows ORDER BY trace_id, span_id"
        ).fetchall(),
        "calls": con.execute(
            "SELECT * EXCLUDE (batch) FROM calls ORDER BY trace_id, span_id"
        ).fetchall(),
        "stage_latency_hist": con.execute(
            "SELECT hour, service, tool, stage, bucket, sum(spans) FROM stage_latency_hist "
            "GROUP BY ALL HAVING sum(spans) <> 0 ORDER BY ALL"
        ).fetchall(),
        "stage_latency_all": con.execute(
            "SELECT hour, stage, bucket, sum(spans) FROM stage_latency_all "
            "GROUP BY ALL HAVING sum(spans) <> 0 ORDER BY ALL"
        ).fetchall(),
        "load_errors": con.execute("SELECT line, reason FROM load_errors ORDER BY ALL").fetchall(),
    }


def _side_tables_hold(con: duckdb.DuckDBPyConnection) -> None:
    """What the derivation's side tables claim holds of ``calls``: each session's count, first
    start and last call; no waiting call before its pair's bound; no call longer than the
    longest."""
    key = "{'t': start_time, 'n': step IS NULL, 's': coalesce(step, 0), 'i': span_id}"
    assert (
        con.execute(
            "SELECT session, calls, first_start, last FROM call_sessions ORDER BY ALL"
        ).fetchall()
        == con.execute(
            f"SELECT session, count(*), min(start_time), max({key}) FROM calls GROUP BY session "
            "ORDER BY ALL"
        ).fetchall()
    )
    assert (
        con.execute(
            "SELECT count(*) FROM calls AS c WHERE c.next_ok_gap IS NULL AND NOT EXISTS ("
            "SELECT 1 FROM call_waits AS w WHERE w.session IS NOT DISTINCT FROM c.session "
            "AND w.tool IS NOT DISTINCT FROM c.tool AND w.since <= c.start_time)"
        ).fetchall()[0][0]
        == 0
    )
    assert con.execute(
        "SELECT count(*) FROM calls WHERE duration_ms > (SELECT max(ms) FROM call_longest)"
    ).fetchall() == [(0,)]


def _bulk(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    con = connect(":memory:")
    try:
        load(con, [path])
        return _tables(con)
    finally:
        con.close()


class _Counting:
    """A connection that counts, per table, the rows each statement's scans read (DuckDB's
    profiler), and the rows DELETEs took out of ``calls``."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.scanned: dict[str, int] = {}
        self.calls_deleted = 0
        con.execute("PRAGMA enable_profiling = 'no_output'")
        con.execute("SET tracked_metrics = ['*']")

    def execute(self, sql: str, *args: Any) -> Any:
        result = self._con.execute(sql, *args)
        if sql.lstrip().startswith("DELETE FROM calls"):
            self.calls_deleted += int(result.fetchall()[0][0])
        profile = json.loads(self._con.get_profiling_information(format="json"))
        for node in self._scans(profile.get("operator", [])):
            table = node["extra_info"]["Table"].rsplit(".", 1)[-1]
            self.scanned[table] = self.scanned.get(table, 0) + int(node.get("rows_scanned", 0))
        return result

    def _scans(self, nodes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for node in nodes:
            if "Table" in node.get("extra_info", {}):
                yield node
            yield from self._scans(node.get("children", []))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _small_row_groups(path: Path) -> duckdb.DuckDBPyConnection:
    """A callgate database whose row groups hold 2,048 rows, so a test-sized table has many and
    min/max pruning shows in the rows scanned."""
    con = duckdb.connect()
    con.execute(f"ATTACH '{path}' AS db (ROW_GROUP_SIZE 2048)")
    con.execute("USE db")
    for statement in DDL:
        con.execute(statement)
    return con


_BASE = _calls(260, seed=5)


class TestSameAsBulk:
    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        order=st.permutations(range(len(_BASE))),
        cuts=st.lists(st.integers(1, len(_BASE) - 1), max_size=6),
        early=st.sets(st.integers(0, len(_BASE) - 1), max_size=8),
    )
    def test_rounds_in_any_order_store_what_one_bulk_load_stores(
        self, order: list[int], cuts: list[int], early: set[int]
    ) -> None:
        """Calls arriving over rounds, out of order, stage spans a round before their call span:
        every table ends as a bulk load of the same file leaves it."""
        bounds = [0, *sorted(set(cuts)), len(order)]
        rounds = [[_BASE[i] for i in order[a:b]] for a, b in itertools.pairwise(bounds)]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.jsonl"
            path.touch()
            con = connect(":memory:")
            try:
                held: list[SpanRecord] = []
                for number, calls in enumerate(rounds):
                    records, held = held, []
                    for call in calls:
                        spans = spans_of(call)
                        if _BASE.index(call) in early and number < len(rounds) - 1:
                            records.extend(spans[:-1])  # the stages now, the call span next round
                            held.append(spans[-1])
                        else:
                            records.extend(spans)
                    _append(path, records)
                    load(con, [path])
                    _side_tables_hold(con)
                followed = _tables(con)
            finally:
                con.close()
            assert followed == _bulk(path)

    def test_a_long_session_over_many_rounds_moves_few_calls(self, tmp_path: Path) -> None:
        """One session growing by two calls a round for 40 rounds: numbered as in bulk, and a
        round takes out of ``calls`` only the few calls still waiting for an OK call."""
        calls = [dataclasses.replace(c, session="one") for c in _calls(700, seed=9)][:80]
        path = tmp_path / "t.jsonl"
        path.touch()
        con = connect(tmp_path / "f.duckdb")
        moved = []
        try:
            for start in range(0, len(calls), 2):
                waiting = con.execute(
                    "SELECT count(*) FROM calls WHERE next_ok_gap IS NULL"
                ).fetchall()[0][0]
                _append(path, [r for c in calls[start : start + 2] for r in spans_of(c)])
                counting = _Counting(con)
                load(counting, [path])  # type: ignore[arg-type]
                assert counting.calls_deleted <= waiting
                moved.append(counting.calls_deleted)
            followed = _tables(con)
        finally:
            con.close()
        assert followed == _bulk(path)
        assert sum(moved) < len(calls), moved  # renumbering the session each round: ~1,600

    def test_a_database_from_before_the_side_tables_goes_on_as_bulk(self, tmp_path: Path) -> None:
        """A database loaded before ``call_sessions``/``call_waits``/``call_longest`` existed
        gets them from its calls at its next load, and ends as a bulk load."""
        path = tmp_path / "t.jsonl"
        _append(path, [r for c in _BASE[:150] for r in spans_of(c)])
        con = connect(tmp_path / "f.duckdb")
        try:
            load(con, [path])
            for table in ("call_sessions", "call_waits", "call_longest"):
                con.execute(f"DROP TABLE {table}")
            for start in range(150, len(_BASE), 40):
                _append(path, [r for c in _BASE[start : start + 40] for r in spans_of(c)])
                load(con, [path])
                _side_tables_hold(con)
            followed = _tables(con)
        finally:
            con.close()
        assert followed == _bulk(path)


class TestTwoCopies:
    @settings(
        max_examples=6,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        cuts=st.lists(st.integers(1, len(_BASE) - 1), min_size=1, max_size=5),
        bad=st.sets(st.integers(0, 6), max_size=3),
    )
    def test_both_copies_end_as_a_bulk_load_and_each_span_is_parsed_once(
        self, cuts: list[int], bad: set[int]
    ) -> None:
        """Rounds of ``follow`` (malformed lines among them): the copy readers open, and the
        other once caught up, hold what a bulk load holds, though only one copy parsed each
        span (the other copied its rows)."""
        bounds = [0, *sorted(set(cuts)), len(_BASE)]
        rounds = [_BASE[a:b] for a, b in itertools.pairwise(bounds)]
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "t.jsonl"
            path.touch()
            database = Path(tmp) / "db.duckdb"
            parsed: list[int] = []
            pending = list(enumerate(rounds))

            appended = [0]

            def next_round() -> bool:
                """Once what was appended is loaded: append the next round, or stop."""
                if sum(parsed) < appended[0]:
                    return False
                if not pending:
                    return True
                number, calls = pending.pop(0)
                records = [r for c in calls for r in spans_of(c)]
                _append(path, records)
                appended[0] += len(records)
                if number in bad:
                    with path.open("a") as out:
                        out.write('{"resourceSpans": [{"scopeSpans": [\n')
                return False

            inserted: list[int] = []

            def counted(con: duckdb.DuckDBPyConnection, paths: Any, **options: Any) -> LoadReport:
                report = load(con, paths, **options)
                inserted.append(report.spans)
                return report

            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(_FOLLOW, "load", counted)
                follow(
                    database,
                    [path],
                    interval=0,
                    on_load=lambda report: parsed.append(report.spans),
                    should_stop=next_round,
                )
            expected = _bulk(path)
            reader = connect(database, read_only=True)
            try:
                assert _tables(reader) == expected
            finally:
                reader.close()
            other = next(c for c in copies(database) if c != served(database))
            con = connect(other)
            try:
                catch_up(con, served(database))
                assert _tables(con) == expected
            finally:
                con.close()
        assert sum(inserted) == sum(parsed) == sum(len(spans_of(c)) for c in _BASE)


class TestRoundCost:
    def test_a_round_reads_the_stored_spans_of_its_time_only(self, tmp_path: Path) -> None:
        """The same 40-call round on a database four times larger reads no more stored spans
        (the repeat check and the latency move prune by time) and moves no more calls."""
        calls = _calls(60_000, seed=11, long_every=4)
        path = tmp_path / "t.jsonl"
        path.touch()
        con = _small_row_groups(tmp_path / "f.duckdb")
        costs = []
        try:
            position = 0
            for size in (1_500, 6_000):
                _append(path, [r for c in calls[position:size] for r in spans_of(c)])
                load(con, [path])
                stored = con.execute("SELECT count(*) FROM span_rows").fetchall()[0][0]
                _append(path, [r for c in calls[size : size + 40] for r in spans_of(c)])
                counting = _Counting(con)
                report: LoadReport = load(counting, [path])  # type: ignore[arg-type]
                costs.append((stored, counting.scanned["span_rows"], counting.calls_deleted))
                assert report.spans > 0
                position = size + 40
        finally:
            con.close()
        (small, read_small, moved_small), (large, read_large, moved_large) = costs
        assert large > 3.5 * small
        assert read_large <= 1.5 * read_small + 6 * 2048, costs
        assert read_large < large / 4, costs
        assert moved_large <= moved_small + 10, costs

    def test_a_round_reads_the_stored_calls_it_can_change_only(self, tmp_path: Path) -> None:
        """The same 40-call round on a database four times larger reads no more stored calls:
        numbering, the calls an OK call frees and the histogram's join read only from where
        those calls can start (before: 7,681 rows at 1,500 calls stored, 28,648 at 6,000)."""
        calls = _calls(60_000, seed=11, long_every=4)
        path = tmp_path / "t.jsonl"
        path.touch()
        con = _small_row_groups(tmp_path / "f.duckdb")
        costs = []
        try:
            position = 0
            for size in (1_500, 6_000):
                _append(path, [r for c in calls[position:size] for r in spans_of(c)])
                load(con, [path])
                stored = con.execute("SELECT count(*) FROM calls").fetchall()[0][0]
                _append(path, [r for c in calls[size : size + 40] for r in spans_of(c)])
                counting = _Counting(con)
                load(counting, [path])  # type: ignore[arg-type]
                costs.append((stored, counting.scanned["calls"]))
                _side_tables_hold(con)
                position = size + 40
            followed = _tables(con)
        finally:
            con.close()
        (small, read_small), (large, read_large) = costs
        assert large > 3.5 * small
        assert read_large <= 1.5 * read_small + 2 * 2048, costs
        assert read_large < large / 2, costs  # one 2,048-row group
        assert followed == _bulk(path)


class TestReaders:
    def test_a_reader_opens_at_once_during_a_round(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """While a round holds its copy open, a reader in another process opens the database
        read-only with no wait at all (timeout 0) and sees the previous round's spans."""
        calls = _calls(400, seed=13)
        path = tmp_path / "t.jsonl"
        _append(path, [r for c in calls[:20] for r in spans_of(c)])
        database = tmp_path / "db.duckdb"
        inside, release = threading.Event(), threading.Event()
        rounds: list[int] = []

        def held_load(con: duckdb.DuckDBPyConnection, paths: Any, **options: Any) -> LoadReport:
            report = load(con, paths, **options)
            rounds.append(report.spans)
            if len(rounds) == 3:  # the third round: b again, with the new spans
                inside.set()
                release.wait(60)
            return report

        monkeypatch.setattr(_FOLLOW, "load", held_load)
        worker = threading.Thread(
            target=follow,
            args=(database, [path]),
            kwargs={"interval": 0.01, "should_stop": lambda: len(rounds) >= 3},
        )
        worker.start()
        try:
            while len(rounds) < 2:
                worker.join(0.01)
            _append(path, [r for c in calls[20:40] for r in spans_of(c)])
            assert inside.wait(60)
            reader = subprocess.run(
                [sys.executable, "-c", _READER, str(database)],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "PYTHONPATH": str(_ROOT)},
                check=False,
            )
        finally:
            release.set()
            worker.join(60)
        assert reader.returncode == 0, reader.stderr
        first = sum(len(spans_of(c)) for c in calls[:20])
        assert int(reader.stdout) == first

    @pytest.mark.parametrize(
        ("message", "raised"),
        [("Query interrupted", KeyboardInterrupt), ("something else", RuntimeError)],
    )
    def test_an_interrupted_statement_stops_the_follower_as_an_interrupt(
        self,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        message: str,
        raised: type[BaseException],
    ) -> None:
        """DuckDB reports a Ctrl-C during a statement as ``RuntimeError('Query interrupted')``:
        the follower raises it as ``KeyboardInterrupt`` (the CLI stops quietly); any other
        ``RuntimeError`` goes through as it is."""
        path = tmp_path / "t.jsonl"
        path.touch()

        def interrupted(con: duckdb.DuckDBPyConnection, paths: Any, **options: Any) -> LoadReport:
            raise RuntimeError(message)

        monkeypatch.setattr(_FOLLOW, "load", interrupted)
        with pytest.raises(raised):
            follow(tmp_path / "db.duckdb", [path], interval=0)

    def test_a_commit_interrupted_raises_the_interrupt(self, tmp_path: Path) -> None:
        """A COMMIT that DuckDB interrupted has ended the transaction already: the load raises
        the interrupt (which ``follow`` turns into ``KeyboardInterrupt``), not "cannot rollback -
        no transaction is active" from the ROLLBACK after it (``load --follow`` stopped by
        ``bench/freshness.py`` printed that traceback)."""
        path = tmp_path / "t.jsonl"
        _append(path, [r for c in _BASE[:5] for r in spans_of(c)])

        class InterruptedCommit:
            def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
                self._con = con

            def execute(self, sql: str, *args: Any) -> Any:
                result = self._con.execute(sql, *args)
                if sql == "COMMIT":
                    raise RuntimeError("Query interrupted")
                return result

            def __getattr__(self, name: str) -> Any:
                return getattr(self._con, name)

        con = connect(tmp_path / "f.duckdb")
        try:
            with pytest.raises(RuntimeError, match=r"^Query interrupted$"):
                load(InterruptedCommit(con), [path])  # type: ignore[arg-type]
        finally:
            con.close()

    def test_an_existing_database_becomes_the_first_copy(self, tmp_path: Path) -> None:
        """Following a database that exists keeps its spans: it becomes the copy readers open,
        and the second copy starts as its twin."""
        path = tmp_path / "t.jsonl"
        calls = _calls(300, seed=17)
        _append(path, [r for c in calls for r in spans_of(c)])
        database = tmp_path / "db.duckdb"
        con = connect(database)
        load(con, [path])
        con.close()
        prepare(database)
        first, second = copies(database)
        assert database.is_symlink() and served(database) == first
        for copy in (database, first, second):
            reader = connect(copy, read_only=True)
            try:
                count = reader.execute("SELECT count(*) FROM span_rows").fetchall()[0][0]
            finally:
                reader.close()
            assert count == sum(len(spans_of(c)) for c in calls)


_READER = """
import sys
from analytics.database import connect
con = connect(sys.argv[1], read_only=True, timeout=0)
print(con.execute("SELECT count(*) FROM span_rows").fetchall()[0][0])
"""
