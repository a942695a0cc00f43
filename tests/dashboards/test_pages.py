"""Every page under AppTest on the fixture database: the numbers shown are analytics' numbers."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from analytics import call_latency, gates, metrics, reconstruct
from analytics.metrics import Filters
from dashboards import fmt
from dashboards.settings import TTL_ENV
from dashboards.views import PAGES
from dashboards.views.overview import KIND_LABELS

from .conftest import make_app
from .helpers import (
    TTL,
    assert_same,
    expected_overview,
    parse_count,
    parse_rate,
    shown,
    table_text,
)

ALL = Filters()


def open_page(at: AppTest, slug: str) -> AppTest:
    """Run the app on page ``slug`` and check it rendered without an exception."""
    if "page" not in at.session_state:
        at.run()
    at.sidebar.radio(key="page").set_value(slug).run()
    assert not at.exception, at.exception
    return at


def records(at: AppTest, index: int) -> list[dict[str, Any]]:
    """The rows of the page's ``index``-th dataframe."""
    rows: list[dict[str, Any]] = at.dataframe[index].value.to_dict("records")
    return rows


def metric_values(at: AppTest) -> dict[str, str]:
    """Metric label -> the value shown."""
    return {m.label: m.value for m in at.metric}


class TestEveryPage:
    def test_every_page_renders_without_error(self, app: AppTest) -> None:
        """Each page renders a header and no exception, error or warning."""
        app.run()
        for page in PAGES:
            open_page(app, page.slug)
            assert [h.value for h in app.main.header] == [page.title]
            assert not app.error and not app.warning


class TestOverview:
    def test_numbers_equal_analytics(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """The six headline numbers are analytics' numbers over all calls."""
        app.run()
        assert not app.exception
        assert_same(shown(metric_values(app)), expected_overview(con, ALL))

    def test_tool_and_service_filters(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """With a tool and a service picked, the numbers are analytics' for the same filters."""
        app.run()
        app.sidebar.multiselect(key="tools").set_value(["refund_order"])
        app.sidebar.multiselect(key="services").set_value(["support-bot"]).run()
        filters = Filters(tools=("refund_order",), services=("support-bot",))
        assert_same(shown(metric_values(app)), expected_overview(con, filters))

    def test_principal_filter(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """A principal filter narrows the numbers to that principal's calls."""
        principal = metrics.filter_options(con).principals[3]
        app.run()
        app.sidebar.multiselect(key="principals").set_value([principal]).run()
        assert_same(
            shown(metric_values(app)), expected_overview(con, Filters(principals=(principal,)))
        )

    def test_relative_window_ends_at_the_latest_call(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """ "Last hour" means the hour before the latest call in the database."""
        last = metrics.filter_options(con).last
        assert last is not None
        app.run()
        app.sidebar.selectbox(key="window").set_value("Last hour").run()
        expected = expected_overview(con, Filters(start=last - timedelta(hours=1)))
        assert_same(shown(metric_values(app)), expected)
        assert expected.calls < metrics.overview(con)[0].calls

    def test_split_per_tool_equals_gate_rates(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The per-tool table shows gate_rates(by=tool): each kind's share of the tool's calls."""
        app.run()
        rows = {r["tool"]: r for r in records(app, 0)}
        for g in gates.gate_rates(con, by="tool"):
            row = rows[g.tool]
            assert row["calls"] == g.calls
            for kind in gates.GATE_KINDS:
                assert row[KIND_LABELS[kind]] == fmt.rate(g.rate(kind))
            assert row["all not OK"] == fmt.rate(g.rejected / g.calls)

    def test_pending_approvals_exclude_expired_ones(
        self,
        fixture_db: Path,
        monkeypatch: pytest.MonkeyPatch,
        con: duckdb.DuckDBPyConnection,
    ) -> None:
        """Undecided approvals older than the confirmation TTL are expired, not pending."""
        forever = timedelta(days=3650)
        undecided = sum(f.pending for f in metrics.confirmation_funnel(con, ttl=forever))
        found = gates.pending_approvals(con, ttl=TTL)
        assert found.lapsed > 0 and found.open + found.lapsed == undecided
        assert found.open == sum(f.pending for f in metrics.confirmation_funnel(con, ttl=TTL))
        app = make_app(monkeypatch, fixture_db)
        app.run()
        assert parse_count(metric_values(app)["Pending approvals"]) == found.open
        assert f"{fmt.count(found.lapsed)} more expired" in " ".join(c.value for c in app.caption)
        monkeypatch.setenv(TTL_ENV, str(10 * 365 * 86400))
        app = make_app(monkeypatch, fixture_db)
        app.run()
        assert parse_count(metric_values(app)["Pending approvals"]) == undecided


class TestRejections:
    def test_heatmap_table_equals_rejection_rate(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The tool x code table lists rejection_rate(by=tool_code): counts, denominators, rates."""
        open_page(app, "rejections")
        expected = metrics.rejection_rate(con, by="tool_code", min_calls=20)
        rows = records(app, 0)
        assert sorted(
            (r["tool"], r["code"], r["rejected"], r["calls"], r["rate"]) for r in rows
        ) == sorted((r.tool, r.code, r.rejected, r.calls, fmt.rate(r.rate)) for r in expected)
        kinds = {k.code: k.kind for k in gates.code_kinds(con)}
        assert {r["code"]: r["kind"] for r in rows} == {
            code: KIND_LABELS[kinds[code]] for code in {r["code"] for r in rows}
        }

    def test_per_tool_and_fields(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """Per-tool rates and the top failing fields are analytics' rows."""
        open_page(app, "rejections")
        tools = metrics.rejection_rate(con, by="tool", min_calls=20)
        assert [(r["tool"], r["rejected"], r["calls"]) for r in records(app, 1)] == [
            (r.tool, r.rejected, r.calls) for r in tools
        ]
        fields = metrics.invalid_fields(con, limit=10)
        assert [(r["tool"], r["field"], r["calls"]) for r in records(app, 2)] == [
            (f.tool, f.field, f.calls) for f in fields
        ]

    def test_minimum_calls_floor(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """Raising the floor above every tool's calls blanks the rates, not the counts."""
        open_page(app, "rejections")
        app.number_input(key="rejections_min_calls").set_value(100_000).run()
        rows = records(app, 0)
        assert {r["rate"] for r in rows} == {fmt.NO_RATE}
        assert sum(r["rejected"] for r in rows) == metrics.overview(con)[0].rejected

    def test_drill_down_opens_on_the_biggest_model_error_not_a_gate(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The drill-down opens on the biggest cell the model can fix, never on a human gate."""
        open_page(app, "rejections")
        kinds = {k.code: k.kind for k in gates.code_kinds(con)}
        cells = metrics.rejection_rate(con, by="tool_code")
        biggest = max(cells, key=lambda r: r.rejected)
        assert kinds[str(biggest.code)] == "human_gate", "the fixture's biggest cell is a gate"
        worst = max(
            (r for r in cells if kinds[str(r.code)] == "model_error"), key=lambda r: r.rejected
        )
        assert app.selectbox(key="rejections_cell").value == (worst.tool, worst.code)
        text = " ".join(m.value for m in app.markdown)
        assert f"**{fmt.count(worst.rejected)}** of {fmt.count(worst.calls)}" in text

    def test_drill_down_lists_example_traces(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The cell's example traces are calls of that tool with that code, linked to the explorer."""
        open_page(app, "rejections")
        app.selectbox(key="rejections_cell").set_value(("get_order", "NOT_FOUND")).run()
        links = [r["trace"] for r in records(app, 3)]
        assert links
        for link in links:
            view = reconstruct.trace(con, link.removeprefix("?page=trace&trace="))
            assert view is not None
            assert (view.calls[0].tool, view.calls[0].code) == ("get_order", "NOT_FOUND")

    def test_heatmap_codes_in_stage_order_and_scale_not_swamped(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """Columns follow the pipeline's stages; the colour scale saturates below 100%."""
        open_page(app, "rejections")
        spec = json.loads(app.get("vega_lite_chart")[0].proto.spec)
        layers = spec["layer"]
        assert layers[0]["encoding"]["x"]["sort"] == [k.code for k in gates.code_kinds(con)]
        stages = [k.stage for k in gates.code_kinds(con)]
        assert stages == sorted(stages, key=lambda s: metrics.PIPELINE_STAGES.index(s))
        domain = layers[0]["encoding"]["color"]["scale"]["domain"]
        rates = [r.rate for r in metrics.rejection_rate(con, by="tool_code") if r.rate]
        assert domain[0] == 0 and domain[1] < max(rates)


class TestRecovery:
    def test_per_tool_equals_recovery_rate(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The per-tool table and the headline rate are recovery_rate's (K=3)."""
        open_page(app, "recovery")
        expected = metrics.recovery_rate(con, k=3)
        assert [(r["tool"], r["fixable rejections"], r["recovered"]) for r in records(app, 0)] == [
            (r.tool, r.rejected, r.recovered) for r in expected
        ]
        total = sum(r.recovered for r in expected) / sum(r.rejected for r in expected)
        assert parse_rate(metric_values(app)["Recovery rate"]) == pytest.approx(total, abs=5e-4)

    def test_rate_axis_runs_to_100_percent(self, app: AppTest) -> None:
        """The per-tool bars are drawn on 0-100%, so 48% reads as half, not as a full bar."""
        open_page(app, "recovery")
        spec = json.loads(app.get("vega_lite_chart")[0].proto.spec)
        layer = spec["layer"][0]
        assert layer["encoding"]["x"]["scale"]["domain"] == [0.0, 1.0]

    def test_k_is_passed_through(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """Changing K shows recovery_rate for that K."""
        open_page(app, "recovery")
        app.number_input(key="recovery_k").set_value(1).run()
        expected = metrics.recovery_rate(con, k=1)
        assert [r["recovered"] for r in records(app, 0)] == [r.recovered for r in expected]


class TestConfirmations:
    def test_funnel_equals_confirmation_funnel(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """Each step of the funnel is the sum of confirmation_funnel over tools."""
        open_page(app, "confirmations")
        rows = metrics.confirmation_funnel(con)
        shown_values = metric_values(app)
        assert parse_count(shown_values["Required"]) == sum(r.required for r in rows)
        assert parse_count(shown_values["Executed"]) == sum(r.approved_executed for r in rows)
        assert parse_count(shown_values["Refused"]) == sum(r.approved_refused for r in rows)
        assert parse_count(shown_values["Denied"]) == sum(r.denied for r in rows)
        pending = gates.pending_approvals(con, ttl=TTL)
        assert parse_count(shown_values["Expired"]) == sum(r.expired for r in rows)
        assert parse_count(shown_values["Pending"]) == sum(r.pending for r in rows) == pending.open
        assert pending.lapsed and sum(r.expired for r in rows) >= pending.lapsed
        assert [(r["tool"], r["Required"]) for r in records(app, 0)] == [
            (r.tool, r.required) for r in rows
        ]

    def test_human_gates_by_reason(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """The reasons table is analytics' human_gates_by_reason, row for row."""
        open_page(app, "confirmations")
        shown = [(r["reason"], r["asked"], r["denied"]) for r in records(app, 1)]
        assert shown == [(g.reason, g.asked, g.denied) for g in gates.human_gates_by_reason(con)]
        assert shown


class TestLoops:
    def test_tables_equal_loop_guards_replays_and_sessions(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """Loop guards, replays and the affected sessions are analytics' rows."""
        open_page(app, "loops")
        guards = metrics.loop_guards(con)
        assert [(r["tool"], r["code"], r["calls"], r["sessions"]) for r in records(app, 0)] == [
            (g.tool, g.code, g.calls, g.sessions) for g in guards
        ]
        replays = metrics.replays(con)
        assert [(r["tool"], r["replayed"]) for r in records(app, 1)] == [
            (r.tool, r.replayed) for r in replays
        ]
        sessions = metrics.stuck_sessions(con, limit=50)
        assert [r["session"] for r in records(app, 2)] == [
            f"?page=trace&session={s.session}" for s in sessions
        ]
        values = metric_values(app)
        assert parse_count(values["Loop guards"]) == sum(g.calls for g in guards)
        assert parse_count(values["Replays"]) == sum(r.replayed for r in replays)


class TestLatency:
    def test_call_latency_per_tool(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """The first table is call_latency per tool: calls and p50/p95/p99 in fitting units."""
        open_page(app, "latency")
        expected = call_latency.call_latency(con)
        assert [(r["tool"], r["calls"], r["p50"], r["p99"]) for r in records(app, 0)] == [
            (t.tool, t.calls, fmt.ms(t.p50_ms), fmt.ms(t.p99_ms)) for t in expected
        ]

    def test_table_equals_stage_latency(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """Stages in pipeline order with analytics' span counts and percentiles."""
        open_page(app, "latency")
        expected = metrics.stage_latency(con)
        assert [(r["stage"], r["spans"], r["p50"], r["p99"]) for r in records(app, 1)] == [
            (s.stage, s.spans, fmt.ms(s.p50_ms), fmt.ms(s.p99_ms)) for s in expected
        ]

    def test_durations_read_in_a_unit_that_fits(self, app: AppTest) -> None:
        """Every duration is 1-999 of µs, ms or s (or 0): never "0.000852 ms", never e-notation."""
        open_page(app, "latency")
        cells = [r[p] for i in (0, 1) for r in records(app, i) for p in ("p50", "p95", "p99")]
        assert cells
        for cell in cells:
            assert re.fullmatch(r"(0|[1-9][\d,]*(\.\d+)?|0\.\d+) (µs|ms|s)", cell), cell
            assert not cell.startswith("0.0") and "e" not in cell.split()[0]

    def test_stage_chart_is_one_panel_per_stage(
        self, app: AppTest, con: duckdb.DuckDBPyConnection
    ) -> None:
        """Stages are small multiples, each titled with its own unit; axes never use e-notation."""
        open_page(app, "latency")
        specs = [json.loads(c.proto.spec) for c in app.get("vega_lite_chart")]
        tools, stages = specs
        titles = stages["facet"]["sort"]
        assert [t.split(" (")[0] for t in titles] == [s.stage for s in metrics.stage_latency(con)]
        assert all(t.endswith(("(µs)", "(ms)", "(s)")) for t in titles)
        assert stages["resolve"]["scale"]["y"] == "independent"
        for encoding in (tools["encoding"], stages["spec"]["encoding"]):
            fmt_ = encoding["y"]["axis"]["format"]
            assert fmt_.endswith("r"), fmt_  # d3 "r": decimal notation, never 1e-3
        assert tools["encoding"]["y"]["field"] in ("µs", "ms", "s")

    def test_percentile_choice_applies(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """Choosing p50 redraws both charts with the p50 values."""
        open_page(app, "latency")
        app.segmented_control(key="latency_percentile").set_value("p50").run()
        tools = json.loads(app.get("vega_lite_chart")[0].proto.spec)
        assert tools["title"].startswith("p50 call latency")


class TestTraceExplorer:
    def test_trace_from_the_url(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """?page=trace&trace=ID opens the trace: its spans in order, codes and timings."""
        call = metrics.stuck_sessions(con, limit=1)[0]
        summary = reconstruct.session_calls(con, call.session)[0]
        view = reconstruct.trace(con, summary.trace_id)
        assert view is not None
        app.query_params["page"] = "trace"
        app.query_params["trace"] = summary.trace_id
        app.run()
        assert not app.exception
        table = table_text(app)
        root = view.roots[0]
        assert list(table["span"]) == [root.name, *(c.stage for c in root.children)]
        assert list(table["code"])[-1] == (root.children[-1].code or "")
        assert list(table["took"]) == [fmt.ms(n.duration_ms) for n in (root, *root.children)]
        assert any(summary.trace_id in c.value for c in app.code)

    def test_search_by_session(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """A session id lists the session's calls in order, and opens the one picked."""
        session = metrics.stuck_sessions(con, limit=1)[0].session
        open_page(app, "trace")
        app.text_input(key="trace_query").set_value(session).run()
        calls = reconstruct.session_calls(con, session)
        assert [r["trace"] for r in records(app, 0)] == [
            f"?page=trace&trace={c.trace_id}" for c in calls
        ]
        assert table_text(app)["span"][0] == f"execute_tool {calls[0].tool}"
        assert app.query_params["session"] == session

    def test_search_by_call_id(self, app: AppTest, con: duckdb.DuckDBPyConnection) -> None:
        """The model's call id finds its call."""
        summary = reconstruct.session_calls(con, metrics.stuck_sessions(con, limit=1)[0].session)[0]
        assert summary.call_id
        open_page(app, "trace")
        app.text_input(key="trace_query").set_value(summary.call_id).run()
        assert [r["trace"] for r in records(app, 0)] == [f"?page=trace&trace={summary.trace_id}"]

    def test_unknown_id(self, app: AppTest) -> None:
        """An id that matches nothing says so."""
        open_page(app, "trace")
        app.text_input(key="trace_query").set_value("no-such-thing").run()
        assert "Nothing found" in app.warning[0].value
