"""The click commands, through CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from rich.console import Console

from analytics.cli import analytics_cli
from analytics.latency import StageLatency
from analytics.render import metric_table

from .conftest import dataset, span_count
from .test_reconstruct import RESUMED_TRACE


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(analytics_cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def _loaded(tmp_path: Path, span_file: Path) -> str:
    database = str(tmp_path / "cli.duckdb")
    code, _ = _run("load", str(span_file), "--db", database)
    assert code == 0
    return database


class TestLoadCommand:
    def test_load_prints_a_summary(self, tmp_path, span_file):
        """load reports the spans it inserted."""
        code, out = _run("load", str(span_file), "--db", str(tmp_path / "x.duckdb"))
        assert code == 0
        assert f"loaded {span_count(dataset())} spans from 1 file(s)" in out

    def test_load_json(self, tmp_path, span_file):
        """load --json prints machine-readable counts."""
        code, out = _run("load", str(span_file), "--db", str(tmp_path / "x.duckdb"), "--json")
        assert code == 0 and json.loads(out)["spans"] == span_count(dataset())

    def test_foreign_file_is_a_clear_error(self, tmp_path):
        """A foreign file exits non-zero with the reason."""
        foreign = tmp_path / "a.csv"
        foreign.write_text("a,b\n1,2\n")
        code, out = _run("load", str(foreign), "--db", str(tmp_path / "x.duckdb"))
        assert code == 1 and "not OTLP JSON trace lines" in out


class TestReportCommand:
    def test_report_tables(self, tmp_path, span_file):
        """report prints one table per metric."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("report", "--db", database, "--min-calls", "1")
        assert code == 0
        for title in (
            "overview",
            "rejection rate by tool",
            "recovery rate",
            "confirmation funnel",
            "stage latency",
        ):
            assert title in out

    def test_report_json_with_filters(self, tmp_path, span_file):
        """report --json honours filters and K."""
        database = _loaded(tmp_path, span_file)
        code, out = _run(
            "report",
            "--db",
            database,
            "--json",
            "--tool",
            "refund_order",
            "-k",
            "4",
            "--min-calls",
            "1",
            "--since",
            "2026-01-01T00:00:00Z",
        )
        assert code == 0
        data = json.loads(out)
        assert data["overview"][0]["calls"] == 15
        assert data["recovery_rate"][0]["recovered"] == 4
        assert data["confirmation_funnel"][0]["required"] == 5

    def test_report_series(self, tmp_path, span_file):
        """--bucket turns every metric into a time series."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("report", "--db", database, "--json", "--bucket", "1h")
        assert code == 0
        assert [r["calls"] for r in json.loads(out)["overview"]] == [7, 5, 9]

    def test_missing_database(self, tmp_path):
        """report without a database says to load first."""
        code, out = _run("report", "--db", str(tmp_path / "none.duckdb"))
        assert code == 1 and "callgate load" in out


class TestDatabaseErrors:
    @pytest.mark.parametrize(
        "command", [["report"], ["trace", RESUMED_TRACE], ["export", "--parquet", "pq"]]
    )
    def test_not_duckdb_is_a_message(self, tmp_path, command):
        """report/trace/export on a file that is not DuckDB: one clear line, exit 1, no traceback."""
        path = tmp_path / "README.md"
        path.write_text("# not a database\n")
        code, out = _run(*command, "--db", str(path))
        assert code == 1
        assert "is not a DuckDB database" in out and "Traceback" not in out

    @pytest.mark.parametrize("command", [["report"], ["trace", "--session", "s1"]])
    def test_not_callgates_database_is_a_message(self, tmp_path, command):
        """A DuckDB file that callgate did not write is named as such."""
        path = tmp_path / "shop.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE orders (id INTEGER)")
        con.close()
        code, out = _run(*command, "--db", str(path))
        assert code == 1 and "not callgate's" in out and "Traceback" not in out

    def test_load_refuses_someone_elses_database(self, tmp_path, span_file):
        """load does not add callgate's tables to another application's DuckDB file."""
        path = tmp_path / "shop.duckdb"
        con = duckdb.connect(str(path))
        con.execute("CREATE TABLE orders (id INTEGER)")
        con.close()
        code, out = _run("load", str(span_file), "--db", str(path))
        assert code == 1 and "not callgate's" in out


class TestTraceCommand:
    def test_trace_tree(self, tmp_path, span_file):
        """trace TRACE_ID prints the span tree with stages, codes and retries."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("trace", RESUMED_TRACE, "--db", database)
        assert code == 0
        assert "execute_tool refund_order" in out and "guard.execute" in out
        assert "guard.retry" in out and "approval history" in out

    def test_trace_json(self, tmp_path, span_file):
        """trace --json gives the rebuild as data."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("trace", RESUMED_TRACE, "--db", database, "--json")
        assert code == 0 and json.loads(out)["calls"][0]["code"] == "OK"

    def test_session_and_call_id(self, tmp_path, span_file):
        """--session lists a session's calls; --call-id finds one call."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("trace", "--session", "s2", "--db", database, "--json")
        assert code == 0 and [c["step"] for c in json.loads(out)] == [1, 2, 3, 4, 5]
        code, out = _run("trace", "--call-id", "call_s1_3", "--db", database, "--json")
        assert code == 0 and json.loads(out)[0]["code"] == "NOT_FOUND"

    def test_needs_exactly_one_selector(self, tmp_path, span_file):
        """trace refuses no selector or two."""
        database = _loaded(tmp_path, span_file)
        assert _run("trace", "--db", database)[0] == 2
        assert _run("trace", RESUMED_TRACE, "--session", "s1", "--db", database)[0] == 2

    def test_unknown_trace(self, tmp_path, span_file):
        """An unknown trace id is an error."""
        database = _loaded(tmp_path, span_file)
        assert _run("trace", "f" * 32, "--db", database)[0] == 1


class TestExportCommand:
    def test_export_parquet(self, tmp_path, span_file):
        """export --parquet writes day partitions."""
        database = _loaded(tmp_path, span_file)
        code, out = _run("export", "--db", database, "--parquet", str(tmp_path / "pq"))
        assert code == 0 and "1 days" in out
        assert (tmp_path / "pq" / "day=2026-01-01").is_dir()


class TestReportUnits:
    def test_stage_latency_reads_in_the_unit_that_fits(self, tmp_path: Path) -> None:
        """Stage latency in `callgate report` says µs or ms as fits, never 0.000 (issue 15.4)."""
        rows = [
            StageLatency(
                bucket=None, stage="rules", spans=3, p50_ms=0.000852, p95_ms=0.0426, p99_ms=49.6
            )
        ]
        console = Console(width=200, record=True)
        console.print(metric_table("stage latency", rows))
        text = console.export_text()
        assert "0.852 µs" in text and "42.6 µs" in text and "49.6 ms" in text
        assert "0.000" not in text and "p50_ms" not in text and "p50" in text
