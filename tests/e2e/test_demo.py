"""The main job end to end: demo traffic -> span files -> DuckDB -> metrics equal the guard's own counts."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from rich.console import Console

from analytics.load import connect
from analytics.metrics import call_counts, confirmation_funnel, loop_guards, recovery_rate, replays
from callgate.demo import DemoOptions, DemoRun, run_demo

SESSIONS = 300


@pytest.fixture(scope="module", params=["trail", "sidecar"])
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    out = tmp_path_factory.mktemp(request.param)
    options = DemoOptions(sessions=SESSIONS, seed=11, out=out, otlp=request.param == "sidecar")
    return run_demo(options, Console(quiet=True))


class TestNothingLost:
    def test_every_span_loads(self, demo: DemoRun) -> None:
        """No line of the span files is malformed, and the database holds one call per guard result."""
        assert demo.load_errors == 0
        assert demo.database is not None
        con = connect(demo.database, read_only=True)
        try:
            (calls,) = con.execute("SELECT count(*) FROM calls").fetchone() or (0,)
        finally:
            con.close()
        assert calls == len(demo.tally.outcomes) > SESSIONS

    def test_calls_per_tool_and_code(self, demo: DemoRun) -> None:
        """Calls per tool and code in the database equal the guard's results, code for code."""
        assert demo.database is not None
        con = connect(demo.database, read_only=True)
        try:
            counted = Counter({(c.tool or "", c.code or ""): c.calls for c in call_counts(con)})
        finally:
            con.close()
        assert counted == demo.tally.by_tool_and_code()

    def test_replays_loop_guards_confirmations_recoveries(self, demo: DemoRun) -> None:
        """Replays, loop guards, the confirmation funnel and recoveries equal the guard's own counts."""
        assert demo.database is not None
        con = connect(demo.database, read_only=True)
        try:
            replayed = sum(r.replayed for r in replays(con))
            guards = Counter()
            for row in loop_guards(con):
                guards[row.code] += row.calls
            funnel = Counter()
            # The guard's tally calls every undecided approval pending, whatever its age: the
            # funnel says the same with a TTL longer than the run (by default lapsed ones expire).
            for row in confirmation_funnel(con, ttl=timedelta(days=3650)):
                funnel.update(
                    required=row.required,
                    executed=row.approved_executed,
                    refused=row.approved_refused,
                    denied=row.denied,
                    expired=row.expired,
                    pending=row.pending,
                )
            recovered = recovery_rate(con, k=3, min_calls=0)
        finally:
            con.close()
        tally = demo.tally
        assert replayed == tally.replays() > 0
        assert guards == tally.loop_guards()
        expected = tally.confirmations()
        assert {k: v for k, v in funnel.items() if v} == {k: v for k, v in expected.items() if v}
        assert (
            sum(r.recovered for r in recovered),
            sum(r.rejected for r in recovered),
        ) == tally.recovery(3)

    def test_side_effects_match_executed_approvals(self, demo: DemoRun) -> None:
        """Every refund applied is an approved call that ran, or one whose answer was lost (TIMEOUT,
        outcome unknown); no other call changed the world."""
        unknown = sum(1 for o in demo.tally.outcomes if o.resumed and o.code == "TIMEOUT")
        assert demo.tally.side_effects == demo.tally.confirmations()["executed"] + unknown


def test_span_files_are_written(tmp_path: Path) -> None:
    """The demo leaves its span files and database under --out."""
    run = run_demo(DemoOptions(sessions=20, seed=3, out=tmp_path), Console(quiet=True))
    assert (
        list(run.spans_dir.glob("*.jsonl")) and run.database is not None and run.database.exists()
    )
