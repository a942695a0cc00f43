"""The loader: incremental, idempotent, rotation-aware, tolerant of bad lines, strict on foreign files."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import threading
from pathlib import Path

import duckdb
import pytest

from analytics.follow import follow
from analytics.load import ForeignFileError, connect, discover_files, load
from analytics.schema import COLUMNS, SPAN_COLUMNS
from analytics.synth import write_span_file

from .conftest import dataset, span_count


def _count(con: duckdb.DuckDBPyConnection, table: str = "spans") -> int:
    return int(con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    connection = connect(tmp_path / "db.duckdb")
    yield connection
    connection.close()


class TestLoad:
    def test_loads_every_span_with_typed_columns(self, con, span_file):
        """Every span lands in spans; call spans carry the contract's columns, typed."""
        report = load(con, [span_file])
        assert report.spans == span_count(dataset()) == _count(con)
        row = con.execute(
            "SELECT tool, session, principal, service, code, ok, step, invalid_fields "
            "FROM spans WHERE call_id = 'call_s2_1' AND category = 'call'"
        ).fetchall()
        assert row == [
            (
                "refund_order",
                "s2",
                "p2",
                "svc-b",
                "INVALID_ARGUMENTS",
                False,
                1,
                ["/amount_cents", "/currency"],
            )
        ]

    def test_calls_table_has_one_row_per_call(self, con, span_file):
        """calls holds one row per execute_tool span, numbered within its session."""
        load(con, [span_file])
        assert _count(con, "calls") == 21
        seqs = con.execute("SELECT seq FROM calls WHERE session = 's2' ORDER BY step").fetchall()
        assert [s for (s,) in seqs] == [1, 2, 3, 4, 5]

    def test_stage_rows_carry_their_call(self, con, span_file):
        """Stage spans get the tool, session and principal of their call for join-free metrics."""
        load(con, [span_file])
        rows = con.execute(
            "SELECT DISTINCT tool, session, principal FROM stages WHERE call_id = 'call_s1_3'"
        ).fetchall()
        assert rows == [("refund_order", "s1", "p1")]

    def test_attributes_outside_the_contract_keep_the_whole_list(self, con, tmp_path):
        """A span with an attribute the contract lacks keeps every attribute, as sent."""
        calls = dataset()[:2]
        odd = dataclasses.replace(calls[0], extra={"x.custom": "v", "guard.step": "three"})
        load(con, [write_span_file(tmp_path / "t.json", [odd, calls[1]])])
        rows = dict(
            con.execute(
                "SELECT call_id, attributes IS NOT NULL FROM spans WHERE category = 'call'"
            ).fetchall()
        )
        assert rows == {"call_s1_1": True, "call_s1_2": False}
        kept = con.execute(
            "SELECT attribute(attributes, 'x.custom'), attribute(attributes, 'guard.step'), step "
            "FROM spans WHERE call_id = 'call_s1_1' AND category = 'call'"
        ).fetchall()
        assert kept == [("v", "three", None)]

    def test_spans_has_a_typed_column_per_contract_attribute(self, con, span_file):
        """The spans view shows every contract column, typed, whatever span_rows packs."""
        load(con, [span_file])
        described = {
            name: sql_type for name, sql_type, *_ in con.execute("DESCRIBE spans").fetchall()
        }
        assert list(described) == list(SPAN_COLUMNS)
        assert all(described[c.name] == c.sql_type for c in COLUMNS)

    def test_only_call_spans_store_call_columns(self, con, span_file):
        """span_rows packs the call-only columns of a call span, once; other spans store none."""
        load(con, [span_file])
        rows = con.execute(
            "SELECT category, count(*), count(call), min(len(call)), max(len(call)) "
            "FROM span_rows GROUP BY category ORDER BY category"
        ).fetchall()
        assert rows == [("call", 21, 21, 1, 1), ("stage", _count(con) - 21, 0, None, None)]

    def test_kvlist_and_bytes_values_are_kept_as_sent(self, con, tmp_path):
        """Values callgate never sends (kvlist, bytes), on attributes and events, are not lost."""
        path = write_span_file(tmp_path / "t.json", dataset()[:3])
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        spans = lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"]
        stage = next(s for s in spans if s["name"].startswith("guard."))
        call = next(s for s in spans if s["name"].startswith("execute_tool "))
        kvlist = {"values": [{"key": "a", "value": {"stringValue": "b"}}]}
        stage["attributes"].append({"key": "x.map", "value": {"kvlistValue": kvlist}})
        call["attributes"].append({"key": "x.bytes", "value": {"bytesValue": "AAEC"}})
        stage["events"] = [
            {
                "timeUnixNano": stage["startTimeUnixNano"],
                "name": "e",
                "attributes": [{"key": "x.map", "value": {"kvlistValue": kvlist}}],
            }
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        report = load(con, [path])
        assert (report.spans, report.errors) == (span_count(dataset()[:3]), 0)
        kept = con.execute(
            "SELECT attribute(attributes, 'x.map'), "
            "events[1].attributes[1].value.kvlistValue::VARCHAR FROM spans WHERE span_id = ?",
            [stage["spanId"]],
        ).fetchall()
        assert [tuple(json.loads(v) for v in row) for row in kept] == [(kvlist, kvlist)]
        assert con.execute(
            "SELECT attribute(attributes, 'x.bytes'), tool IS NOT NULL FROM spans "
            "WHERE span_id = ?",
            [call["spanId"]],
        ).fetchall() == [("AAEC", True)]

    def test_discover_files_orders_rotated_siblings_first(self, tmp_path):
        """A path brings in its rotated backups (name-timestamp.ext[.gz]), oldest first."""
        current = write_span_file(tmp_path / "traces.json", dataset()[:3])
        backup = write_span_file(
            tmp_path / "traces-2026-01-01T00-00-00.000.json.gz", dataset()[3:6]
        )
        os.utime(backup, (1, 1))
        assert discover_files([current]) == [backup, current]


class TestIncremental:
    def test_growing_file_is_read_from_where_it_stopped(self, con, tmp_path):
        """A second load reads only the lines appended since the first."""
        calls = dataset()
        path = write_span_file(tmp_path / "t.json", calls[:10], batch=8)
        first = load(con, [path])
        rest = tmp_path / "rest.json"
        write_span_file(rest, calls[10:], batch=8)
        with path.open("ab") as f:
            f.write(rest.read_bytes())
        second = load(con, [path])
        assert first.spans == span_count(calls[:10])
        assert second.spans == span_count(calls[10:])
        assert second.bytes == rest.stat().st_size
        assert _count(con, "calls") == 21

    def test_unfinished_last_line_waits_for_its_newline(self, con, tmp_path):
        """A line still being written is not loaded and not an error; it loads once complete."""
        calls = dataset()
        path = write_span_file(tmp_path / "t.json", calls[:5])
        tail = write_span_file(tmp_path / "tail.json", calls[5:8]).read_bytes()
        with path.open("ab") as f:
            f.write(tail[:100])
        load(con, [path])
        assert _count(con) == span_count(calls[:5])
        assert _count(con, "load_errors") == 0
        with path.open("ab") as f:
            f.write(tail[100:])
        load(con, [path])
        assert _count(con) == span_count(calls[:8])

    def test_recovery_is_recomputed_when_a_session_continues(self, con, tmp_path):
        """A fix that arrives in a later load still recovers the earlier rejection."""
        calls = dataset()
        path = write_span_file(tmp_path / "t.json", calls[:1])
        load(con, [path])
        with path.open("ab") as f:
            f.write(write_span_file(tmp_path / "x.json", calls[1:2]).read_bytes())
        load(con, [path])
        gap = con.execute("SELECT next_ok_gap FROM calls WHERE call_id = 'call_s1_1'").fetchall()
        assert gap == [(1,)]

    def test_follow_loads_as_the_file_grows(self, tmp_path):
        """--follow keeps loading appended lines and closes the database between rounds."""
        calls = dataset()
        path = write_span_file(tmp_path / "t.json", calls[:4])
        database = tmp_path / "f.duckdb"
        loaded: list[int] = []
        rounds = {"n": 0}

        def stop() -> bool:
            rounds["n"] += 1
            if rounds["n"] == 3:
                with path.open("ab") as f:
                    f.write(write_span_file(tmp_path / "x.json", calls[4:]).read_bytes())
            return rounds["n"] > 8

        worker = threading.Thread(
            target=follow,
            args=(database, [path]),
            kwargs={
                "interval": 0.01,
                "on_load": lambda r: loaded.append(r.spans),
                "should_stop": stop,
            },
        )
        worker.start()
        worker.join(timeout=30)
        assert sum(loaded) == span_count(calls)
        con = connect(database, read_only=True)
        try:
            assert _count(con) == span_count(calls)
        finally:
            con.close()


class TestIdempotent:
    def test_loading_twice_adds_nothing(self, con, span_file):
        """The same file loaded again adds no span."""
        load(con, [span_file])
        again = load(con, [span_file])
        assert again.spans == 0
        assert _count(con) == span_count(dataset())

    def test_same_spans_in_another_file_add_nothing(self, con, span_file, tmp_path):
        """Spans already stored (by trace and span id) are skipped whatever file they come from."""
        load(con, [span_file])
        copy = tmp_path / "copy-of-traces.ndjson"
        lines = span_file.read_bytes().splitlines(keepends=True)
        copy.write_bytes(b"".join(reversed(lines)))
        assert load(con, [copy]).spans == 0
        assert _count(con) == span_count(dataset())
        assert _count(con, "calls") == 21

    def test_a_line_repeated_inside_a_file_counts_once(self, con, tmp_path):
        """A batch written twice into one file (an exporter retry) is stored once."""
        path = write_span_file(tmp_path / "t.json", dataset()[:4], batch=1000)
        line = path.read_bytes()
        path.write_bytes(line + line)
        assert load(con, [path]).spans == span_count(dataset()[:4])


class TestRotation:
    def test_rotated_file_is_not_read_again(self, con, tmp_path):
        """After a rename to name-timestamp.ext, the old data is recognised and the new file loads."""
        calls = dataset()
        path = write_span_file(tmp_path / "traces.json", calls[:10])
        load(con, [path])
        path.rename(tmp_path / "traces-2026-01-01T01-00-00.000.json")
        write_span_file(tmp_path / "traces.json", calls[10:])
        report = load(con, [tmp_path / "traces.json"])
        assert report.spans == span_count(calls[10:])
        assert {f.path for f in report.files} == {
            str(tmp_path / "traces-2026-01-01T01-00-00.000.json"),
            str(tmp_path / "traces.json"),
        }

    def test_rotated_then_compressed_file_is_not_read_again(self, con, tmp_path):
        """A rotated file compressed to .gz is the same file: its fingerprint is its first line."""
        calls = dataset()
        path = write_span_file(tmp_path / "traces.json", calls[:10])
        load(con, [path])
        with path.open("rb") as src, gzip.open(tmp_path / "traces-1.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
        write_span_file(tmp_path / "traces.json", calls[10:])
        before = _count(con, "load_state")
        report = load(con, [tmp_path / "traces.json"])
        assert report.spans == span_count(calls[10:])
        assert _count(con, "load_state") == before + 1

    def test_rotated_file_finished_after_the_last_load(self, con, tmp_path):
        """Lines written just before rotation are picked up from the rotated file."""
        calls = dataset()
        path = write_span_file(tmp_path / "traces.json", calls[:5])
        load(con, [path])
        with path.open("ab") as f:
            f.write(write_span_file(tmp_path / "x.json", calls[5:9]).read_bytes())
        path.rename(tmp_path / "traces-2026-01-01T02-00-00.000.json")
        write_span_file(tmp_path / "traces.json", calls[9:])
        (tmp_path / "x.json").unlink()
        load(con, [tmp_path / "traces.json"])
        assert _count(con) == span_count(calls)


class TestGzip:
    def test_gzip_file_loads_like_plain(self, con, tmp_path):
        """A .json.gz span file loads the same spans as the plain file."""
        path = write_span_file(tmp_path / "traces.json.gz", dataset(), batch=64)
        assert load(con, [path]).spans == span_count(dataset())
        assert _count(con, "calls") == 21

    def test_gzip_is_recognised_by_content(self, con, tmp_path):
        """A gzip file without the .gz suffix is still read as gzip."""
        path = write_span_file(tmp_path / "traces.json.gz", dataset())
        renamed = path.rename(tmp_path / "traces.json")
        assert load(con, [renamed]).spans == span_count(dataset())


class TestMalformedLines:
    def test_bad_lines_are_recorded_and_neighbours_load(self, con, tmp_path):
        """Garbage and a truncated line go to load_errors with their line numbers; the rest loads."""
        calls = dataset()
        a = write_span_file(tmp_path / "a.json", calls[:3], batch=1000).read_bytes()
        b = write_span_file(tmp_path / "b.json", calls[3:6], batch=1000).read_bytes()
        path = tmp_path / "mixed.json"
        path.write_bytes(a + b"this is not json\n" + b[: len(b) // 2] + b"\n" + b)
        report = load(con, [path])
        assert report.spans == span_count(calls[:6])
        assert report.errors == 2
        errors = con.execute("SELECT line, reason FROM load_errors ORDER BY line").fetchall()
        assert [line for line, _ in errors] == [2, 3]
        assert all("malformed JSON" in reason for _, reason in errors)

    def test_line_numbers_continue_across_loads(self, con, tmp_path):
        """A bad line appended later is numbered from the start of the file."""
        calls = dataset()
        path = write_span_file(tmp_path / "t.json", calls[:2], batch=1)
        load(con, [path])
        lines = len(path.read_bytes().splitlines())
        with path.open("ab") as f:
            f.write(b'{"resourceSpans": [\n')
            f.write(write_span_file(tmp_path / "x.json", calls[2:3]).read_bytes())
        load(con, [path])
        assert con.execute("SELECT line FROM load_errors").fetchall() == [(lines + 1,)]
        assert _count(con) == span_count(calls[:3])


class TestForeignFile:
    def test_csv_file_is_refused_and_database_untouched(self, con, span_file, tmp_path):
        """A file that is not OTLP JSON lines raises a clear error and loads nothing at all."""
        load(con, [span_file])
        before = (_count(con), _count(con, "load_state"), _count(con, "load_errors"))
        foreign = tmp_path / "orders.csv"
        foreign.write_text("order_id,amount\nORD-1,100\n")
        newer = write_span_file(tmp_path / "newer.json", dataset()[:2])
        with pytest.raises(ForeignFileError, match="not OTLP JSON trace lines"):
            load(con, [newer, foreign])
        after = (_count(con), _count(con, "load_state"), _count(con, "load_errors"))
        assert after == before

    def test_json_lines_of_something_else_are_refused(self, con, tmp_path):
        """JSON lines without resourceSpans (an OTLP logs file) are not taken for spans."""
        path = tmp_path / "logs.json"
        path.write_text('{"resourceLogs": []}\n{"resourceLogs": []}\n')
        with pytest.raises(ForeignFileError, match="resourceLogs"):
            load(con, [path])
        assert _count(con) == 0

    def test_missing_file_is_an_error(self, con, tmp_path):
        """A path that does not exist is reported, not silently skipped."""
        with pytest.raises(FileNotFoundError):
            load(con, [tmp_path / "nope.json"])
