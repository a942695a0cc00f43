"""One truth: `callgate report`, `callgate trace` and the dashboard give the same numbers and ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from streamlit.testing.v1 import AppTest

from analytics import reconstruct
from analytics.cli import report_command, trace_command
from analytics.load import connect
from dashboards.data import FUNNEL_STEPS

from .conftest import make_app
from .helpers import parse_count
from .test_pages import metric_values, open_page


def _report(db: Path, *args: str) -> dict[str, list[dict[str, object]]]:
    result = CliRunner().invoke(report_command, ["--db", str(db), "--json", *args])
    assert result.exit_code == 0, result.output
    data: dict[str, list[dict[str, object]]] = json.loads(result.output)
    return data


def _funnel_totals(report: dict[str, list[dict[str, object]]]) -> dict[str, int]:
    rows = report["confirmation_funnel"]
    return {name: sum(int(str(r[name])) for r in rows) for name, _, _ in FUNNEL_STEPS}


class TestReportEqualsDashboard:
    @pytest.mark.parametrize("ttl", ["900", "60", "315360000"])
    def test_confirmation_funnel(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch, ttl: str
    ) -> None:
        """Every funnel step of the report equals the Confirmations page's tile, at any TTL."""
        monkeypatch.setenv("CALLGATE_CONFIRMATION_TTL", ttl)
        report = _report(demo_db)
        monkeypatch.setenv("CALLGATE_DASHBOARD_CONFIRMATION_TTL", ttl)
        app = open_page(make_app(monkeypatch, demo_db), "confirmations")
        shown = metric_values(app)
        totals = _funnel_totals(report)
        assert totals["required"] > 0
        for name, label, _ in FUNNEL_STEPS:
            assert parse_count(shown[label]) == totals[name], label

    def test_pending_tile_is_the_reports_pending(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The Overview's "Pending approvals" is the report's pending count, not its undecided one."""
        report = _report(demo_db)
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert parse_count(metric_values(app)["Pending approvals"]) == sum(
            int(str(r["pending"])) for r in report["confirmation_funnel"]
        )

    def test_calls(self, demo_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The Overview's call count is the report's."""
        report = _report(demo_db)
        app = make_app(monkeypatch, demo_db)
        app.run()
        assert parse_count(metric_values(app)["Calls"]) == int(str(report["overview"][0]["calls"]))


class TestOneIdRule:
    @pytest.fixture
    def trace_id(self, demo_db: Path) -> str:
        con = connect(demo_db, read_only=True)
        try:
            row = con.execute("SELECT trace_id FROM calls ORDER BY trace_id LIMIT 1").fetchone()
        finally:
            con.close()
        assert row is not None
        return str(row[0])

    def test_a_prefix_opens_the_same_trace(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch, trace_id: str
    ) -> None:
        """The prefix `callgate trace` accepts opens the same trace in the Trace explorer."""
        prefix = trace_id[:12]
        cli = CliRunner().invoke(trace_command, [prefix, "--db", str(demo_db), "--json"])
        assert cli.exit_code == 0, cli.output
        assert json.loads(cli.output)["trace_id"] == trace_id
        monkeypatch.setenv("CALLGATE_DASHBOARD_DB", str(demo_db))
        app: AppTest = make_app(monkeypatch, demo_db)
        app.query_params["page"] = "trace"
        app.query_params["trace"] = prefix
        app.run()
        assert not app.exception, app.exception
        assert not [w.value for w in app.warning if "Nothing found" in str(w.value)]
        assert any(trace_id in str(h.value) for h in app.subheader)

    def test_an_ambiguous_prefix_is_refused_alike(
        self, demo_db: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A one-character prefix matches many traces: both say so instead of picking one."""
        con = connect(demo_db, read_only=True)
        try:
            with pytest.raises(reconstruct.AmbiguousIdError):
                reconstruct.lookup(con, "0", columns=("trace_id",))
        finally:
            con.close()
        cli = CliRunner().invoke(trace_command, ["0", "--db", str(demo_db)])
        assert cli.exit_code == 1 and "ambiguous" in cli.output
        app = make_app(monkeypatch, demo_db)
        app.query_params["page"] = "trace"
        app.query_params["trace"] = "0"
        app.run()
        assert any("ambiguous" in str(w.value) for w in app.warning)


class TestFromARateToATrace:
    def test_examples_per_code(self, demo_db: Path) -> None:
        """`--examples 2` lists at most two traces per rejection code, each one `trace` opens."""
        report = _report(demo_db, "--examples", "2")
        examples = report["example_traces"]
        codes = {str(r["code"]) for r in report["rejection_rate_by_code"]} - {"OK"}
        assert {str(e["code"]) for e in examples} == codes
        for code in codes:
            assert len([e for e in examples if e["code"] == code]) <= 2
        first = str(examples[0]["trace_id"])
        cli = CliRunner().invoke(trace_command, [first, "--db", str(demo_db), "--json"])
        assert (
            cli.exit_code == 0 and json.loads(cli.output)["calls"][0]["code"] == examples[0]["code"]
        )

    def test_the_hint_names_the_same_database(self, demo_db: Path) -> None:
        """The printed `callgate trace` hints repeat the `--db` the command was given."""
        result = CliRunner().invoke(
            report_command, ["--db", str(demo_db), "--examples", "1"], terminal_width=200
        )
        assert result.exit_code == 0, result.output
        hint = [line for line in result.output.splitlines() if "callgate trace" in line]
        assert hint and all(f"--db {demo_db}" in line for line in hint)

    def test_call_latency_per_tool(self, demo_db: Path) -> None:
        """The report carries per-tool call latency with its percentiles in order."""
        rows = _report(demo_db)["call_latency"]
        assert rows and all(
            float(str(r["p50_ms"])) <= float(str(r["p95_ms"])) <= float(str(r["p99_ms"]))
            for r in rows
        )
