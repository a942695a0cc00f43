"""Human gates by reason (analytics.gates.human_gates_by_reason): what the approvals cost, by why."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import duckdb

from analytics import gates
from analytics.load import connect, load
from guard import TaintMode
from telemetry import configure
from tests.guard.injection.runner import run_suite


class TestHandDataset:
    def test_spans_without_a_reason_fall_back_to_their_code(
        self, db: duckdb.DuckDBPyConnection
    ) -> None:
        """The five asks of the hand dataset: four for risk, one for taint."""
        found = {g.reason: g.asked for g in gates.human_gates_by_reason(db)}
        assert found == {"risk": 4, "taint": 1}


class TestInjectionSuite:
    def test_reasons_and_decisions_match_what_the_suite_did(self, tmp_path: Path) -> None:
        """Every approval the suite asked is counted once under its reason, with its decision."""
        trail = tmp_path / "trail"
        handle = configure(trail_dir=trail, masking_key=b"k")
        summaries = run_suite(
            modes=(TaintMode.SESSION, TaintMode.VOUCHED), observer=handle.observer
        )
        handle.shutdown()
        con = connect(tmp_path / "callgate.duckdb")
        try:
            load(con, sorted(trail.glob("*.jsonl")))
            rows = gates.human_gates_by_reason(con)
            by_tool = gates.human_gates_by_reason(con, by="tool")
        finally:
            con.close()
        names = gates.GATE_REASONS
        user = Counter(names[c] for s in summaries for r in s.runs for c in r.asked)
        attack = Counter(names[c] for s in summaries for r in s.runs for c in r.attack_asked)
        assert {g.reason: g.asked for g in rows} == dict(user + attack)
        assert {g.reason: g.approved for g in rows} == {k: user[k] for k in user + attack}
        assert {g.reason: g.denied for g in rows} == {k: attack[k] for k in user + attack}
        assert set(dict(user + attack)) == {"taint", "untrusted value", "risk"}
        assert sum(g.asked for g in by_tool) == sum(g.asked for g in rows)
