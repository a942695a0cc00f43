"""Alert rules: metrics over a window from the report's own query functions, thresholds, files."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from analytics import alerts, metrics
from analytics.alerts import Rule, RulesError, evaluate, load_rules
from analytics.cli import alerts_command

from .conftest import T0

LAST = T0 + timedelta(hours=2, minutes=8)
"""The latest call of the dataset: the default ``now``."""


def _window(span: timedelta) -> metrics.Filters:
    end = LAST + timedelta(microseconds=1)
    return metrics.Filters(start=end - span, end=end)


class TestValues:
    def test_loop_guards_equal_the_report(self, db: duckdb.DuckDBPyConnection) -> None:
        """A loop-guard rule counts what `metrics.loop_guards` counts over the same window."""
        for window, span in (("15m", timedelta(minutes=15)), ("3h", timedelta(hours=3))):
            [result] = evaluate(db, [Rule(name="l", metric="loop_guards", window=window, above=0)])
            expected = sum(g.calls for g in metrics.loop_guards(db, _window(span)))
            assert result.value == expected and result.now == LAST
            assert result.firing == (expected > 0)

    def test_code_calls_equal_call_counts(self, db: duckdb.DuckDBPyConnection) -> None:
        """A code rule counts the calls `call_counts` gives that code in the window."""
        rule = Rule(
            name="c", metric="code_calls", code="CONFIRMATION_REQUIRED", window="3h", above=2
        )
        [result] = evaluate(db, [rule])
        counts = metrics.call_counts(db, _window(timedelta(hours=3)))
        expected = sum(c.calls for c in counts if c.code == "CONFIRMATION_REQUIRED")
        assert result.value == expected and result.firing == (expected > 2)

    def test_rates_equal_gate_rates(self, db: duckdb.DuckDBPyConnection) -> None:
        """Each kind's rate is `gates.gate_rates`' over the window."""
        from analytics import gates

        [split] = gates.gate_rates(db, _window(timedelta(hours=3)))
        for kind in gates.GATE_KINDS:
            metric = f"{kind}_rate"
            [result] = evaluate(db, [Rule(name=kind, metric=metric, window="3h", above=0)])  # type: ignore[arg-type]
            assert result.value == pytest.approx(split.rate(kind))

    def test_previous_window_and_change(self, db: duckdb.DuckDBPyConnection) -> None:
        """The window before is evaluated too; an empty one has 0 calls and no rate."""
        [count, rate] = evaluate(
            db,
            [
                Rule(name="calls", metric="calls", window="15m", above=1000),
                Rule(name="rej", metric="rejection_rate", window="15m", above=2),
            ],
        )
        assert count.value == 9 and count.previous == 0 and count.change == 9
        assert rate.previous is None and rate.change is None

    def test_min_calls_and_tool_scope(self, db: duckdb.DuckDBPyConnection) -> None:
        """Too few calls never fire; a rule scoped to a tool sees only that tool's calls."""
        quiet = Rule(name="q", metric="loop_guards", window="15m", above=0, min_calls=100)
        other_tool = Rule(
            name="t", metric="loop_guards", window="15m", above=0, tool="refund_order"
        )
        loud = Rule(name="l", metric="loop_guards", window="15m", above=0)
        results = {r.rule.name: r for r in evaluate(db, [quiet, other_tool, loud])}
        assert not results["q"].firing and results["q"].value == results["l"].value
        assert not results["t"].firing and results["t"].value == 0
        assert results["l"].firing
        assert next(r.rule.name for r in evaluate(db, [quiet, loud])) == "l"  # firing first

    def test_pending_growth(self, db: duckdb.DuckDBPyConnection) -> None:
        """Open approvals at the end of the window minus at its start, at the same TTL."""
        from analytics import gates

        ttl = timedelta(minutes=15)
        rule = Rule(name="p", metric="pending_approvals_growth", window="1h", above=0)
        [result] = evaluate(db, [rule], confirmation_ttl=ttl)
        now_open = gates.pending_approvals(db, ttl=ttl).open
        assert result.value == now_open  # an hour earlier nothing was open
        assert result.firing == (now_open > 0)

    def test_an_empty_database_fires_nothing(self, tmp_path: Path) -> None:
        """No calls, no clock: nothing to evaluate."""
        from analytics.load import connect

        con = connect(tmp_path / "empty.duckdb")
        try:
            assert evaluate(con) == []
        finally:
            con.close()


_BAD_FILES = {
    "nan": 'rule = [{name = "x", metric = "calls", above = nan}]',
    "inf": 'rule = [{name = "x", metric = "calls", above = inf}]',
    "unknown key": 'rule = [{name = "x", metric = "calls", above = 1, treshold = 2}]',
    "unknown metric": 'rule = [{name = "x", metric = "vibes", above = 1}]',
    "both thresholds": 'rule = [{name = "x", metric = "calls", above = 1, below = 0}]',
    "no threshold": 'rule = [{name = "x", metric = "calls"}]',
    "code on a rate": 'rule = [{name = "x", metric = "calls", code = "OK", above = 1}]',
    "code missing": 'rule = [{name = "x", metric = "code_rate", above = 0.1}]',
    "zero window": 'rule = [{name = "x", metric = "calls", window = "0m", above = 1}]',
    "bad window": 'rule = [{name = "x", metric = "calls", window = "15 minutes", above = 1}]',
    "threshold as text": 'rule = [{name = "x", metric = "calls", above = "1"}]',
    "no rules": "rule = []",
    "duplicate names": (
        'rule = [{name = "x", metric = "calls", above = 1}, {name = "x", metric = "calls", above = 2}]'
    ),
    "not toml": "rule = [{",
}


class TestRulesFile:
    def test_the_docs_example_loads(self, tmp_path: Path) -> None:
        """The rules file shown in docs/metrics.md loads as written."""
        docs = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
        [block] = re.findall(r"```toml\n(.*?)```", docs, flags=re.S)
        path = tmp_path / "alerts.toml"
        path.write_text(block)
        [rule] = load_rules(path)
        assert (rule.tool, rule.code, rule.span, rule.above) == (
            "refund_order",
            "INVALID_ARGUMENTS",
            timedelta(hours=1),
            0.2,
        )

    @pytest.mark.parametrize("text", list(_BAD_FILES.values()), ids=list(_BAD_FILES))
    def test_bad_files_are_refused_with_the_place(self, tmp_path: Path, text: str) -> None:
        """Every bad file is one RulesError that names the file."""
        path = tmp_path / "alerts.toml"
        path.write_text(text)
        with pytest.raises(RulesError, match=r"alerts\.toml"):
            load_rules(path)

    @given(st.floats(allow_nan=True, allow_infinity=True))
    def test_thresholds_are_finite(self, value: float) -> None:
        """NaN and infinities never become thresholds (a NaN would never, or always, fire)."""
        import math

        if math.isfinite(value):
            assert Rule(name="x", metric="calls", above=value).above == value
        else:
            with pytest.raises(ValueError):
                Rule(name="x", metric="calls", above=value)


class TestCommand:
    def test_firing_exits_1(self, tmp_path: Path, span_file: Path) -> None:
        """A firing rule is printed and the exit code is 1, so cron pages."""
        database = _loaded(tmp_path, span_file)
        result = CliRunner().invoke(alerts_command, ["--db", database], terminal_width=200)
        assert result.exit_code == 1, result.output
        assert "FIRING" in result.output and "loop guards" in result.output

    def test_quiet_exits_0(self, tmp_path: Path, span_file: Path) -> None:
        """No rule fires: exit 0."""
        database = _loaded(tmp_path, span_file)
        rules = tmp_path / "quiet.toml"
        rules.write_text('[[rule]]\nname = "many"\nmetric = "calls"\nabove = 1e9\n')
        result = CliRunner().invoke(alerts_command, ["--db", database, "--rules", str(rules)])
        assert result.exit_code == 0, result.output
        assert "no rule fires (1 checked)" in result.output

    @pytest.mark.parametrize("problem", ["bad rules", "missing rules", "missing db"])
    def test_cannot_evaluate_exits_2(self, tmp_path: Path, span_file: Path, problem: str) -> None:
        """A bad rules file or database: one line on stderr, exit 2 (not "no alert")."""
        database = _loaded(tmp_path, span_file)
        rules = tmp_path / "bad.toml"
        rules.write_text(_BAD_FILES["nan"])
        args = {
            "bad rules": ["--db", database, "--rules", str(rules)],
            "missing rules": ["--db", database, "--rules", str(tmp_path / "nope.toml")],
            "missing db": ["--db", str(tmp_path / "nope.duckdb")],
        }[problem]
        result = CliRunner().invoke(alerts_command, args)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and "error:" in result.stderr

    def test_json_lists_every_rule(self, tmp_path: Path, span_file: Path) -> None:
        """--json has every rule, firing or not, with value, previous and change."""
        import json

        database = _loaded(tmp_path, span_file)
        result = CliRunner().invoke(alerts_command, ["--db", database, "--json"])
        rows = json.loads(result.output)
        con = duckdb.connect(database, read_only=True)
        try:
            expected = {r.rule.name for r in evaluate(con) if r.firing}
        finally:
            con.close()
        assert "loop guards" in expected
        assert {r["name"] for r in rows if r["firing"]} == expected
        assert result.exit_code == 1
        assert {r["name"] for r in rows} == {r.name for r in alerts.DEFAULT_RULES}


def _loaded(tmp_path: Path, span_file: Path) -> str:
    from analytics.load import connect, load

    database = tmp_path / "alerts.duckdb"
    if not database.exists():
        con = connect(database)
        try:
            load(con, [span_file])
        finally:
            con.close()
    return str(database)
