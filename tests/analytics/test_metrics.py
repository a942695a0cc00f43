"""Each metric on the hand-computed dataset of conftest.py: exact numbers."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from analytics import metrics
from analytics.load import connect, load
from analytics.metrics import Filters
from analytics.synth import write_span_file

from .conftest import T0, dataset


def _by_tool(rows):
    return {r.tool: r for r in rows}


class TestOverview:
    def test_totals(self, db):
        """21 calls, 7 OK, 14 rejected, 3 sessions, 2 principals."""
        (row,) = metrics.overview(db)
        assert (row.calls, row.ok, row.rejected, row.sessions, row.principals) == (21, 7, 14, 3, 2)
        assert row.first == T0

    def test_hourly_series(self, db):
        """With a one-hour bucket there is one row per session's hour."""
        rows = metrics.overview(db, bucket=timedelta(hours=1))
        assert [(r.bucket, r.calls) for r in rows] == [
            (T0, 7),
            (T0 + timedelta(hours=1), 5),
            (T0 + timedelta(hours=2), 9),
        ]

    def test_filter_options(self, db):
        """The pickers offer every service, tool and principal."""
        options = metrics.filter_options(db)
        assert options.services == ("svc-a", "svc-b")
        assert options.tools == ("get_order", "refund_order")
        assert options.principals == ("p1", "p2")


class TestRejectionRate:
    def test_per_tool_with_denominator(self, db):
        """get_order: 2 of 6 rejected; refund_order: 12 of 15."""
        rows = _by_tool(metrics.rejection_rate(db, min_calls=1))
        assert (rows["get_order"].rejected, rows["get_order"].calls) == (2, 6)
        assert (rows["refund_order"].rejected, rows["refund_order"].calls) == (12, 15)
        assert rows["refund_order"].rate == pytest.approx(12 / 15)

    def test_floor_hides_rates_of_few_calls(self, db):
        """Below min_calls the rate is None but the counts are still there."""
        rows = _by_tool(metrics.rejection_rate(db, min_calls=10))
        assert rows["get_order"].rate is None and rows["get_order"].calls == 6
        assert rows["refund_order"].rate == pytest.approx(0.8)

    def test_per_code_over_all_calls(self, db):
        """Per code, the denominator is every call: CONFIRMATION_REQUIRED 4 of 21."""
        rows = {r.code: r for r in metrics.rejection_rate(db, by="code", min_calls=1)}
        assert rows["CONFIRMATION_REQUIRED"].rejected == 4
        assert rows["INVALID_ARGUMENTS"].rejected == 3
        assert all(r.calls == 21 for r in rows.values())
        assert sum(r.rejected for r in rows.values()) == 14
        assert "OK" not in rows

    def test_per_tool_and_code(self, db):
        """Per tool and code, the denominator is the tool's calls."""
        rows = {
            (r.tool, r.code): r for r in metrics.rejection_rate(db, by="tool_code", min_calls=1)
        }
        assert (
            rows["refund_order", "INVALID_ARGUMENTS"].rejected,
            rows["refund_order", "INVALID_ARGUMENTS"].calls,
        ) == (2, 15)
        assert rows["get_order", "STEP_LIMIT"].rate == pytest.approx(1 / 6)

    def test_filters_by_principal_service_tool_and_time(self, db):
        """Filters narrow the calls counted."""
        (p2,) = metrics.rejection_rate(db, Filters(principals=("p2",)), min_calls=1)
        assert (p2.tool, p2.rejected, p2.calls) == ("refund_order", 4, 5)
        svc_a = _by_tool(metrics.rejection_rate(db, Filters(services=("svc-a",)), min_calls=1))
        assert svc_a["refund_order"].calls == 10
        (tool,) = metrics.rejection_rate(db, Filters(tools=("get_order",)), min_calls=1)
        assert tool.calls == 6
        late = _by_tool(
            metrics.rejection_rate(
                db, Filters(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=2)), min_calls=1
            )
        )
        assert list(late) == ["refund_order"] and late["refund_order"].calls == 5


class TestInvalidFields:
    def test_top_fields_per_tool(self, db):
        """/amount_cents was named by both refund_order INVALID_ARGUMENTS calls."""
        rows = {(r.tool, r.field): r for r in metrics.invalid_fields(db)}
        top = rows["refund_order", "/amount_cents"]
        assert (top.calls, top.invalid_calls, top.share) == (2, 2, 1.0)
        assert rows["refund_order", "/currency"].calls == 1
        assert rows["get_order", "/order_id"].share == 1.0
        assert metrics.invalid_fields(db)[0].field == "/amount_cents"


class TestRecoveryRate:
    def test_default_k_is_three(self, db):
        """K=3: get_order 1 of 1; refund_order 2 of 4 (gaps 1 and 3 recover, two gaps of 4 do not)."""
        rows = _by_tool(metrics.recovery_rate(db, min_calls=1))
        assert (rows["get_order"].recovered, rows["get_order"].rejected) == (1, 1)
        assert (rows["refund_order"].recovered, rows["refund_order"].rejected) == (2, 4)
        assert rows["refund_order"].rate == 0.5

    def test_larger_k_recovers_more(self, db):
        """K=4 takes the two fixes that came four calls later."""
        rows = _by_tool(metrics.recovery_rate(db, k=4, min_calls=1))
        assert rows["refund_order"].recovered == 4

    def test_smaller_k_recovers_less(self, db):
        """K=1 keeps only the immediate fixes."""
        rows = _by_tool(metrics.recovery_rate(db, k=1, min_calls=1))
        assert (rows["get_order"].recovered, rows["refund_order"].recovered) == (1, 1)

    def test_rejects_k_below_one(self, db):
        """K must be positive."""
        with pytest.raises(ValueError):
            metrics.recovery_rate(db, k=0)


class TestRecoveryDetails:
    def test_by_code_adds_up_to_by_tool(self, db):
        """Recovery per code counts the same rejections and recoveries as recovery per tool."""
        for k in (1, 3, 4):
            by_tool = metrics.recovery_rate(db, k=k, min_calls=1)
            by_code = metrics.recovery_by_code(db, k=k, min_calls=1)
            assert sum(r.rejected for r in by_code) == sum(r.rejected for r in by_tool) == 5
            assert sum(r.recovered for r in by_code) == sum(r.recovered for r in by_tool)

    def test_unrecovered_calls_are_the_rest(self, db):
        """K=3 leaves refund_order's two rejections fixed four calls later; K=4 leaves none."""
        at_three = metrics.unrecovered_calls(db, k=3)
        assert [c.tool for c in at_three] == ["refund_order", "refund_order"]
        assert at_three[0].start_time >= at_three[1].start_time
        assert metrics.unrecovered_calls(db, k=4) == []

    def test_calls_matching_are_the_counted_calls(self, db):
        """The example calls behind each (tool, code) cell are exactly the calls counted there."""
        for cell in metrics.call_counts(db):
            assert cell.code is not None and cell.tool is not None
            found = metrics.calls_matching(db, code=cell.code, tool=cell.tool, limit=1000)
            assert len(found) == cell.calls
            assert {(c.tool, c.code) for c in found} == {(cell.tool, cell.code)}
            assert [c.start_time for c in found] == sorted(
                (c.start_time for c in found), reverse=True
            )


class TestReplaysAndLoops:
    def test_replays(self, db):
        """One replayed refund in one session."""
        (row,) = metrics.replays(db)
        assert (row.tool, row.calls, row.replayed, row.sessions) == ("refund_order", 15, 1, 1)

    def test_loop_guards(self, db):
        """LOOP_DETECTED in s2, STEP_LIMIT in s3: one call and one session each."""
        rows = {(r.tool, r.code): (r.calls, r.sessions) for r in metrics.loop_guards(db)}
        assert rows == {
            ("refund_order", "LOOP_DETECTED"): (1, 1),
            ("get_order", "STEP_LIMIT"): (1, 1),
        }

    def test_stuck_sessions(self, db):
        """s2 and s3 hit a guard; s3 also replayed."""
        rows = {r.session: (r.loop_guards, r.replays, r.calls) for r in metrics.stuck_sessions(db)}
        assert rows == {"s2": (1, 0, 5), "s3": (1, 1, 9)}


class TestConfirmationFunnel:
    def test_funnel(self, db):
        """5 asked; approved+executed 1, approved but refused 1, denied 1, expired 1, pending 1."""
        (row,) = metrics.confirmation_funnel(db)
        assert (
            row.tool,
            row.required,
            row.approved_executed,
            row.approved_refused,
            row.denied,
            row.expired,
            row.pending,
        ) == ("refund_order", 5, 1, 1, 1, 1, 1)

    def test_time_filter_applies_to_the_request(self, db):
        """Only s2's request is in its hour; its decision counts although the filter is on it."""
        (row,) = metrics.confirmation_funnel(
            db, Filters(start=T0 + timedelta(hours=1), end=T0 + timedelta(hours=1, minutes=3))
        )
        assert (row.required, row.approved_executed) == (1, 1)


class TestStageLatency:
    def test_exact_percentiles(self, db):
        """execute: 10..70 ms gives p50 40, p95 67, p99 69.4 exactly; every other stage 1 ms."""
        rows = {r.stage: r for r in metrics.stage_latency(db, exact=True)}
        execute = rows["execute"]
        assert execute.spans == 7
        assert (execute.p50_ms, execute.p95_ms, execute.p99_ms) == pytest.approx((40, 67, 69.4))
        assert rows["budget"].spans == 21 and rows["budget"].p99_ms == pytest.approx(1.0)

    def test_histogram_percentiles_are_within_three_percent(self, db):
        """The default (histogram) percentiles are within 3% of the exact ones, same counts."""
        exact = metrics.stage_latency(db, exact=True)
        fast = metrics.stage_latency(db)
        assert [(r.stage, r.spans) for r in fast] == [(r.stage, r.spans) for r in exact]
        for f, e in zip(fast, exact, strict=True):
            assert (f.p50_ms, f.p95_ms, f.p99_ms) == pytest.approx(
                (e.p50_ms, e.p95_ms, e.p99_ms), rel=0.03
            )
        assert [r.stage for r in fast][:2] == ["budget", "resolve"]

    def test_rollup_and_raw_histograms_agree(self, db):
        """The hourly rollup and the histogram built from spans give identical numbers."""
        rollup = metrics.stage_latency(db, Filters(start=T0))
        raw = metrics.stage_latency(db, Filters(start=T0, principals=("p1", "p2")))
        assert rollup == raw

    def test_filter_by_tool_uses_the_call_of_each_stage(self, db):
        """Stage spans are filtered by their call's tool: get_order executes 10, 20, 30, 40 ms."""
        for exact in (True, False):
            rows = {
                r.stage: r
                for r in metrics.stage_latency(db, Filters(tools=("get_order",)), exact=exact)
            }
            assert rows["execute"].spans == 4
            assert rows["execute"].p50_ms == pytest.approx(25, rel=0.03)

    def test_late_call_span_moves_its_stages_to_the_tool(self, tmp_path):
        """Stage spans loaded before their call span are counted under the tool once it arrives."""
        calls = dataset()[:3]
        path = write_span_file(tmp_path / "t.json", calls, batch=1000)
        line = path.read_text()
        request = json.loads(line)
        spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
        stages = [s for s in spans if s["name"].startswith("guard.")]
        parents = [s for s in spans if not s["name"].startswith("guard.")]
        first = tmp_path / "first.json"
        request["resourceSpans"][0]["scopeSpans"][0]["spans"] = stages
        first.write_text(json.dumps(request) + "\n")
        con = connect(tmp_path / "late.duckdb")
        try:
            load(con, [first])
            assert {
                r.stage for r in metrics.stage_latency(con, Filters(tools=("get_order",)))
            } == set()
            request["resourceSpans"][0]["scopeSpans"][0]["spans"] = parents
            with first.open("a") as f:
                f.write(json.dumps(request) + "\n")
            load(con, [first])
            fast = metrics.stage_latency(con, Filters(tools=("get_order",)))
            exact = metrics.stage_latency(con, Filters(tools=("get_order",)), exact=True)
            assert [(r.stage, r.spans) for r in fast] == [(r.stage, r.spans) for r in exact]
            assert sum(r.spans for r in metrics.stage_latency(con)) == sum(
                len(c.stages) for c in calls
            )
        finally:
            con.close()

    def test_daily_series(self, db):
        """A one-day bucket puts every stage span of the day in one row."""
        rows = metrics.stage_latency(db, bucket=timedelta(days=1))
        assert {r.bucket for r in rows} == {T0}


class TestLatencyRollups:
    def test_all_services_and_tools_rollup_matches_the_detailed_one(self, db):
        """Unfiltered stage latency (stage_latency_all) equals the per-tool table summed."""
        tools = tuple(t for (t,) in db.execute("SELECT DISTINCT tool FROM calls").fetchall())
        every_tool = metrics.Filters(tools=tools)
        assert metrics.stage_latency(db) == metrics.stage_latency(db, every_tool)
        assert db.execute("SELECT count(*) FROM stage_latency_all").fetchall()[0][0] > 0
