"""DuckDB and ClickHouse (chDB, in-process) give the same numbers for the same spans."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from analytics import metrics, reconstruct
from analytics.cli import analytics_cli
from analytics.clickhouse import (
    OTEL_TRACES_DDL,
    ChdbBackend,
    ClickHouseConnectBackend,
    export_otel_traces,
)
from analytics.load import connect, load
from analytics.metrics import Filters
from analytics.reconstruct import to_jsonable
from analytics.synth import generate, write_span_file

from .conftest import T0, dataset
from .test_cli_incident import READ_TRACE, TAINTED_TRACE, incident_calls

chdb_session = pytest.importorskip("chdb.session")

_COLUMNS = (
    "Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, "
    "ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, "
    "StatusMessage, `Events.Timestamp`, `Events.Name`, `Events.Attributes`"
)


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ChdbBackend]]:
    """The same spans (the hand-made set and 20,000 generated ones) in DuckDB and in chDB."""
    tmp: Path = tmp_path_factory.mktemp("ch")
    files = [
        write_span_file(tmp / "hand.json", dataset()),
        write_span_file(tmp / "gen.json", generate(spans=20_000, seed=7, tag="e")),
        write_span_file(tmp / "incident.json", incident_calls()),
    ]
    con = connect(tmp / "db.duckdb")
    load(con, files)
    export_otel_traces(con, tmp / "otel.parquet", spelling="mixed")
    session = chdb_session.Session(str(tmp / "chdb"))
    session.query("CREATE DATABASE IF NOT EXISTS callgate")
    session.query(OTEL_TRACES_DDL.replace("otel_traces", "callgate.otel_traces", 1))
    session.query(
        f"INSERT INTO callgate.otel_traces ({_COLUMNS}) "
        f"SELECT * FROM file('{tmp / 'otel.parquet'}', Parquet)"
    )
    session.query("USE callgate")
    try:
        yield con, ChdbBackend(session)
    finally:
        session.close()
        con.close()


def _normal(rows: list[Any]) -> list[dict[str, Any]]:
    """Rows as dicts with floats rounded to 9 significant digits (engines sum differently)."""

    def fix(value: Any) -> Any:
        if isinstance(value, float) and value:
            return round(value, 8 - math.floor(math.log10(abs(value))))
        return value

    return [{k: fix(v) for k, v in asdict(r).items()} for r in rows]


FILTERS = [
    Filters(),
    Filters(tools=("refund_order",)),
    Filters(principals=("p1", "p2")),
    Filters(services=("support-bot",), start=T0, end=T0 + timedelta(hours=6)),
]

METRICS = [
    ("overview", {}),
    ("rejection_rate", {"by": "tool", "min_calls": 1}),
    ("rejection_rate", {"by": "code"}),
    ("rejection_rate", {"by": "tool_code"}),
    ("invalid_fields", {}),
    ("recovery_rate", {"k": 3}),
    ("recovery_rate", {"k": 5}),
    ("recovery_by_code", {"k": 3, "min_calls": 1}),
    ("unrecovered_calls", {"k": 3}),
    ("calls_matching", {"code": "INVALID_ARGUMENTS"}),
    ("calls_matching", {"code": "NOT_FOUND", "tool": "get_order"}),
    ("replays", {}),
    ("loop_guards", {}),
    ("confirmation_funnel", {}),
    ("confirmation_funnel", {"ttl": timedelta(minutes=5)}),
    ("rejection_examples", {"n": 2}),
    ("stage_latency", {}),
]


class TestSameNumbers:
    @pytest.mark.parametrize(("name", "kwargs"), METRICS, ids=lambda x: str(x))
    @pytest.mark.parametrize("filters", FILTERS, ids=range(len(FILTERS)))
    def test_metric_matches(self, engines, name, kwargs, filters):
        """Each metric gives the same rows on DuckDB and on ClickHouse's otel_traces."""
        duck, ch = engines
        function = getattr(metrics, name)
        expected = function(duck, filters, **kwargs)
        assert expected or filters != Filters()
        assert _normal(function(ch, filters, **kwargs)) == _normal(expected)

    @pytest.mark.parametrize(
        "name",
        ["overview", "recovery_rate", "confirmation_funnel", "stage_latency", "invalid_fields"],
    )
    def test_series_match(self, engines, name):
        """Time series buckets line up on both engines."""
        duck, ch = engines
        function = getattr(metrics, name)
        expected = function(duck, bucket=timedelta(minutes=15))
        assert len({r.bucket for r in expected}) > 1
        assert _normal(function(ch, bucket=timedelta(minutes=15))) == _normal(expected)

    def test_alerts_match(self, engines):
        """Every alert metric has the same value and verdict on both engines."""
        from analytics import alerts

        duck, ch = engines
        rules = [
            alerts.Rule(name=m, metric=m, window="1h", above=0, code="OK" if "code" in m else None)
            for m in alerts.METRICS
        ]
        expected = [
            (r.rule.name, r.value, r.previous, r.firing) for r in alerts.evaluate(duck, rules)
        ]
        got = [(r.rule.name, r.value, r.previous, r.firing) for r in alerts.evaluate(ch, rules)]
        assert len(expected) == len(alerts.METRICS)
        for (name, *values), (_, *theirs) in zip(expected, got, strict=True):
            assert [
                v if v is None or isinstance(v, bool) else pytest.approx(v) for v in values
            ] == (theirs), name

    def test_stuck_sessions_match(self, engines):
        """The drill-down list is the same."""
        duck, ch = engines
        assert _normal(metrics.stuck_sessions(ch)) == _normal(metrics.stuck_sessions(duck))

    def test_old_and_new_status_spellings_both_count(self, engines):
        """Error spans are found whether StatusCode says Error or STATUS_CODE_ERROR."""
        _, ch = engines
        rows = ch.fetch(
            "SELECT StatusCode AS s, count() AS n FROM otel_traces "
            "WHERE StatusCode IN ('Error', 'STATUS_CODE_ERROR') GROUP BY s ORDER BY s",
            {},
        )
        assert [r["s"] for r in rows] == ["Error", "STATUS_CODE_ERROR"]
        errors = ch.fetch(f"SELECT count() AS n FROM {ch.dialect.calls} WHERE status_code = 2", {})
        assert errors[0]["n"] == sum(
            r["n"]
            for r in ch.fetch(
                "SELECT count() AS n FROM otel_traces WHERE startsWith(SpanName, 'execute_tool ') "
                "AND StatusCode IN ('Error', 'STATUS_CODE_ERROR')",
                {},
            )
        )


class _ChdbAsClickHouseConnect:
    """A clickhouse-connect client stand-in that runs queries on the chDB session."""

    def __init__(self, session: Any) -> None:
        self._session = session

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> Any:
        table = self._session.query(sql, "ArrowTable", params=parameters or None)

        class Result:
            column_names = tuple(table.column_names)
            result_rows = [tuple(row.values()) for row in table.to_pylist()]

        return Result()


class TestReportOnClickHouse:
    def test_report_clickhouse_url_runs_the_metrics_there(self, engines, monkeypatch):
        """report --clickhouse URL runs every metric through the clickhouse-connect backend."""
        duck, ch = engines
        client = _ChdbAsClickHouseConnect(ch._session)
        monkeypatch.setattr(
            "analytics.clickhouse.connect_url", lambda url: ClickHouseConnectBackend(client)
        )
        result = CliRunner().invoke(
            analytics_cli,
            ["report", "--clickhouse", "http://ch:8123/otel", "--json", "--min-calls", "1"],
            catch_exceptions=False,
        )
        assert result.exit_code == 0
        data = json.loads(result.output)
        assert data["overview"][0]["calls"] == metrics.overview(duck)[0].calls
        assert data["recovery_rate"] == to_jsonable(metrics.recovery_rate(duck, min_calls=1))


class TestReconstructionOnClickHouse:
    def test_trace_tree_and_calls_match(self, engines):
        """A trace rebuilt from otel_traces has DuckDB's span tree, stage outcomes, codes and calls."""
        duck, ch = engines
        (trace_id,) = duck.execute(
            "SELECT trace_id FROM calls WHERE approval_id IS NOT NULL ORDER BY start_time LIMIT 1"
        ).fetchone()
        expected, got = reconstruct.trace(duck, trace_id), reconstruct.trace(ch, trace_id)
        assert expected is not None and got is not None

        def shape(nodes):
            return [(n.name, n.stage, n.stage_outcome, n.code, shape(n.children)) for n in nodes]

        assert shape(got.roots) == shape(expected.roots)
        assert got.calls == expected.calls and got.approvals == expected.approvals
        assert reconstruct.trace(ch, "0" * 32) is None

    def test_session_and_call_id_lookups_match(self, engines):
        """A session's calls and a call found by its call id are the same on both engines."""
        duck, ch = engines
        session, call_id = duck.execute(
            "SELECT session, call_id FROM calls WHERE call_id IS NOT NULL ORDER BY start_time LIMIT 1"
        ).fetchone()
        assert reconstruct.session_calls(ch, session) == reconstruct.session_calls(duck, session)
        assert reconstruct.calls_by_call_id(ch, call_id) == reconstruct.calls_by_call_id(
            duck, call_id
        )
        assert reconstruct.calls_with_code(ch, "NOT_FOUND", limit=3) == reconstruct.calls_with_code(
            duck, "NOT_FOUND", limit=3
        )

    def test_attributes_come_back_typed_on_both_engines(self, engines):
        """Contract attributes are typed out of ClickHouse's string map: the same as DuckDB's."""
        duck, ch = engines
        (trace_id,) = duck.execute(
            "SELECT trace_id FROM calls WHERE attempts > 1 ORDER BY start_time LIMIT 1"
        ).fetchone()
        expected, got = reconstruct.trace(duck, trace_id), reconstruct.trace(ch, trace_id)
        assert expected is not None and got is not None

        def attributes(nodes):
            return [(n.attributes, attributes(n.children)) for n in nodes]

        assert attributes(got.roots) == attributes(expected.roots)
        assert got.roots[0].attributes["guard.attempts"] > 1
        assert [e.name for e in got.roots[0].children[-1].events] == [
            e.name for e in expected.roots[0].children[-1].events
        ]

    def test_id_prefixes_and_taint_links_match(self, engines):
        """resolve_id and tainting_call run on ClickHouse and agree with DuckDB."""
        duck, ch = engines
        (trace_id, session) = duck.execute(
            "SELECT trace_id, session FROM calls ORDER BY start_time LIMIT 1"
        ).fetchone()
        for column, value in (("trace_id", trace_id), ("session", session)):
            for n in (len(value), 12, 1):
                try:
                    expected = reconstruct.resolve_id(duck, column, value[:n])
                except reconstruct.AmbiguousIdError as exc:
                    with pytest.raises(reconstruct.AmbiguousIdError):
                        reconstruct.resolve_id(ch, column, value[:n])
                    assert "ambiguous" in str(exc)
                    continue
                assert reconstruct.resolve_id(ch, column, value[:n]) == expected == value
        for call in reconstruct.session_calls(duck, session):
            assert reconstruct.tainting_call(ch, call) == reconstruct.tainting_call(duck, call)
        expected, got = reconstruct.trace(duck, TAINTED_TRACE), reconstruct.trace(ch, TAINTED_TRACE)
        assert expected is not None and got is not None
        assert [t.trace_id for t in got.tainted_by] == [READ_TRACE]
        assert got.tainted_by == expected.tainted_by
        assert got.calls[0].message == expected.calls[0].message
