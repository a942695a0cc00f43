"""Gates apart from errors (analytics.gates) on the hand-computed 21-call dataset.

By hand (tests/analytics/conftest.py): 7 of the 21 calls are OK. Of the 14 others, model errors
(fixable) are the three INVALID_ARGUMENTS, NOT_FOUND and the approved-then-refused
AMOUNT_EXCEEDS_REFUNDABLE (5); policy refusals LOOP_DETECTED and STEP_LIMIT (2); human gates the
five asks (CONFIRMATION_REQUIRED x4, TAINTED_CONTEXT), the denial and the expiry (7).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
from click.testing import CliRunner

from analytics import gates, metrics
from analytics.cli import analytics_cli
from analytics.metrics import Filters

from .conftest import T0


class TestGateRates:
    def test_kinds_by_hand(self, db: duckdb.DuckDBPyConnection) -> None:
        """Each call that is not OK is one kind; the four add up to the rejected calls."""
        [split] = gates.gate_rates(db)
        assert split.calls == 21
        assert (
            split.model_errors,
            split.policy_refusals,
            split.human_gates,
            split.upstream_failures,
        ) == (5, 2, 7, 0)
        assert split.rejected == metrics.overview(db)[0].rejected == 14
        assert split.rate("human_gate") == 7 / 21

    def test_per_tool(self, db: duckdb.DuckDBPyConnection) -> None:
        """get_order: one INVALID_ARGUMENTS and one STEP_LIMIT among six calls."""
        by_tool = {g.tool: g for g in gates.gate_rates(db, by="tool")}
        get_order = by_tool["get_order"]
        assert (get_order.calls, get_order.model_errors, get_order.policy_refusals) == (6, 1, 1)
        assert by_tool["refund_order"].human_gates == 7

    def test_time_series_adds_up(self, db: duckdb.DuckDBPyConnection) -> None:
        """Hourly buckets (one session each) add up to the total."""
        hourly = gates.gate_rates(db, bucket=timedelta(hours=1))
        assert [g.calls for g in hourly] == [7, 5, 9]
        assert sum(g.human_gates for g in hourly) == 7

    def test_filters_apply(self, db: duckdb.DuckDBPyConnection) -> None:
        """A tool filter counts only that tool's calls."""
        [only] = gates.gate_rates(db, Filters(tools=("get_order",)))
        assert (only.calls, only.rejected) == (6, 2)


class TestCodeKinds:
    def test_stage_order_and_kinds(self, db: duckdb.DuckDBPyConnection) -> None:
        """Codes come in pipeline order with the kind most of their calls had."""
        kinds = gates.code_kinds(db)
        stages = [k.stage for k in kinds]
        assert stages == sorted(stages, key=lambda s: metrics.PIPELINE_STAGES.index(s or ""))
        by_code = {k.code: k for k in kinds}
        assert by_code["STEP_LIMIT"].stage == "budget"
        assert by_code["CONFIRMATION_REQUIRED"].kind == "human_gate"
        assert by_code["INVALID_ARGUMENTS"].kind == "model_error"
        assert by_code["LOOP_DETECTED"].kind == "policy_refusal"
        assert "OK" not in by_code


class TestPendingApprovals:
    def test_open_within_the_ttl(self, db: duckdb.DuckDBPyConnection) -> None:
        """apr_4 is undecided, asked 6 minutes before the latest call: open under a 15-minute TTL."""
        found = gates.pending_approvals(db, ttl=timedelta(minutes=15))
        assert (found.open, found.lapsed) == (1, 0)
        assert found.now == T0 + timedelta(hours=2, minutes=8)

    def test_lapsed_after_the_ttl(self, db: duckdb.DuckDBPyConnection) -> None:
        """Under a 5-minute TTL, or seen a day later, apr_4 has expired: not pending."""
        assert gates.pending_approvals(db, ttl=timedelta(minutes=5)).open == 0
        later = gates.pending_approvals(db, ttl=timedelta(minutes=15), now=T0 + timedelta(days=1))
        assert (later.open, later.lapsed) == (0, 1)

    def test_funnel_splits_at_the_same_ttl(self, db: duckdb.DuckDBPyConnection) -> None:
        """The funnel's pending are the open approvals; the lapsed ones are among its expired."""
        for ttl in (timedelta(minutes=5), timedelta(minutes=15)):
            found = gates.pending_approvals(db, ttl=ttl)
            funnel = metrics.confirmation_funnel(db, ttl=ttl)
            forever = metrics.confirmation_funnel(db, ttl=timedelta(days=3650))
            assert sum(f.pending for f in funnel) == found.open
            assert sum(f.expired for f in funnel) == sum(f.expired for f in forever) + found.lapsed
            assert found.open + found.lapsed == sum(f.pending for f in forever)


class TestReportLines:
    def test_report_prints_the_split(self, tmp_path: Path, span_file: Path) -> None:
        """`callgate report` shows each kind's share, and the four added up to the rejection rate."""
        database = str(tmp_path / "report.duckdb")
        runner = CliRunner()
        assert (
            runner.invoke(analytics_cli, ["load", str(span_file), "--db", database]).exit_code == 0
        )
        result = runner.invoke(analytics_cli, ["report", "--db", database], catch_exceptions=False)
        assert result.exit_code == 0
        assert "gates apart from errors" in result.output
        lines = {
            line.split("│")[1].strip(): line for line in result.output.splitlines() if "│" in line
        }
        assert "7" in lines["human_gate"] and "33.3%" in lines["human_gate"]
        assert "5" in lines["model_error"] and "23.8%" in lines["model_error"]
        assert "66.7%" in lines["rejected (all kinds)"]

    def test_report_json(self, tmp_path: Path, span_file: Path) -> None:
        """--json carries one row per kind (per tool too) with its denominator."""
        database = str(tmp_path / "report.duckdb")
        runner = CliRunner()
        runner.invoke(analytics_cli, ["load", str(span_file), "--db", database])
        result = runner.invoke(analytics_cli, ["report", "--db", database, "--json"])
        data = json.loads(result.output)
        rows = {r["kind"]: r for r in data["gates_apart_from_errors"]}
        assert rows["policy_refusal"] == {
            "bucket": None,
            "tool": None,
            "kind": "policy_refusal",
            "calls": 2,
            "of_calls": 21,
            "rate": 2 / 21,
        }
        by_tool = {
            (r["tool"], r["kind"]): r["calls"] for r in data["gates_apart_from_errors_by_tool"]
        }
        assert by_tool["refund_order", "human_gate"] == 7
