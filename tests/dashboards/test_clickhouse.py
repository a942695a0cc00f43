"""The dashboard on ClickHouse: the collector's ``otel_traces`` table in chDB, in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chdb import session as chdb_session

from analytics.clickhouse import OTEL_TRACES_DDL, ChdbBackend, export_otel_traces
from analytics.load import connect
from analytics.metrics import Filters
from dashboards import source as source_module
from dashboards.settings import CLICKHOUSE_ENV, DB_ENV, REFRESH_ENV

from .helpers import assert_same, expected_overview, shown, table_text


@pytest.fixture(scope="module")
def chdb_backend(fixture_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The fixture database's spans as the ClickHouse exporter writes them, in chDB."""
    parquet = tmp_path_factory.mktemp("clickhouse") / "otel_traces.parquet"
    con = connect(fixture_db, read_only=True)
    try:
        export_otel_traces(con, parquet)
    finally:
        con.close()
    sess = chdb_session.Session()
    sess.query(OTEL_TRACES_DDL)
    sess.query(f"INSERT INTO otel_traces SELECT * FROM file('{parquet}', Parquet)")
    yield ChdbBackend(sess)
    sess.close()


class TestClickHouse:
    def test_overview_on_clickhouse(
        self, monkeypatch: pytest.MonkeyPatch, chdb_backend: Any
    ) -> None:
        """With --clickhouse, the Overview shows analytics' numbers computed on ClickHouse."""
        from streamlit.testing.v1 import AppTest

        from dashboards.server import APP

        monkeypatch.setattr(source_module, "connect_clickhouse", lambda url: chdb_backend)
        monkeypatch.delenv(DB_ENV, raising=False)
        monkeypatch.setenv(CLICKHOUSE_ENV, "http://u:secret@clickhouse:8123/otel")
        monkeypatch.setenv(REFRESH_ENV, "0")
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.run()
        assert not at.exception, at.exception
        readings = {m.label: m.value for m in at.metric}
        assert_same(shown(readings), expected_overview(chdb_backend, Filters()))
        assert "secret" not in " ".join(c.value for c in [*at.caption, *at.sidebar.caption])

    def test_trace_explorer_on_clickhouse(
        self, monkeypatch: pytest.MonkeyPatch, chdb_backend: Any, fixture_db: Path
    ) -> None:
        """With --clickhouse, a trace opened by id shows the same spans, stages and codes as DuckDB."""
        from streamlit.testing.v1 import AppTest

        from analytics import reconstruct
        from dashboards.server import APP

        con = connect(fixture_db, read_only=True)
        try:
            (trace_id,) = con.execute(
                "SELECT trace_id FROM calls ORDER BY start_time LIMIT 1"
            ).fetchone()
            view = reconstruct.trace(con, trace_id)
        finally:
            con.close()
        assert view is not None
        monkeypatch.setattr(source_module, "connect_clickhouse", lambda url: chdb_backend)
        monkeypatch.delenv(DB_ENV, raising=False)
        monkeypatch.setenv(CLICKHOUSE_ENV, "http://u:secret@clickhouse:8123/otel")
        monkeypatch.setenv(REFRESH_ENV, "0")
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.query_params["page"] = "trace"
        at.query_params["trace"] = trace_id
        at.run()
        assert not at.exception, at.exception
        table = table_text(at)
        root = view.roots[0]
        assert list(table["span"]) == [root.name, *(c.stage for c in root.children)]
        assert list(table["code"])[-1] == (root.children[-1].code or "")

    def test_every_page_and_the_new_metrics_on_clickhouse(
        self, monkeypatch: pytest.MonkeyPatch, chdb_backend: Any, fixture_db: Path
    ) -> None:
        """Every page renders on ClickHouse; gates, call latency and pending agree with DuckDB."""
        from datetime import timedelta

        from streamlit.testing.v1 import AppTest

        from analytics import call_latency, gates, reconstruct
        from dashboards.server import APP
        from dashboards.views import PAGES

        con = connect(fixture_db, read_only=True)
        try:
            assert gates.gate_rates(chdb_backend, by="tool") == gates.gate_rates(con, by="tool")
            assert gates.code_kinds(chdb_backend) == gates.code_kinds(con)
            ttl = timedelta(minutes=15)
            ch_pending = gates.pending_approvals(chdb_backend, ttl=ttl)
            assert (ch_pending.open, ch_pending.lapsed) == (
                gates.pending_approvals(con, ttl=ttl).open,
                gates.pending_approvals(con, ttl=ttl).lapsed,
            )
            ch_latency = call_latency.call_latency(chdb_backend)
            duck_latency = call_latency.call_latency(con)
            assert [(r.tool, r.calls) for r in ch_latency] == [
                (r.tool, r.calls) for r in duck_latency
            ]
            for a, b in zip(ch_latency, duck_latency, strict=True):
                assert a.p95_ms == pytest.approx(b.p95_ms, rel=1e-6)
            (session,) = con.execute(
                "SELECT session FROM calls WHERE code = 'TAINTED_CONTEXT' ORDER BY 1 LIMIT 1"
            ).fetchone() or ("",)
            [call] = reconstruct.session_calls(con, session)[-1:]
            assert reconstruct.tainting_call(chdb_backend, call) == reconstruct.tainting_call(
                con, call
            )
        finally:
            con.close()
        monkeypatch.setattr(source_module, "connect_clickhouse", lambda url: chdb_backend)
        monkeypatch.delenv(DB_ENV, raising=False)
        monkeypatch.setenv(CLICKHOUSE_ENV, "http://u:secret@clickhouse:8123/otel")
        monkeypatch.setenv(REFRESH_ENV, "0")
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.run()
        for page in PAGES:
            at.sidebar.radio(key="page").set_value(page.slug).run()
            assert not at.exception, (page.slug, at.exception)
            assert not at.error, (page.slug, [e.value for e in at.error])

    def test_unreachable_server_is_a_message(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A ClickHouse that cannot be reached is a warning on the page, not a traceback."""
        from streamlit.testing.v1 import AppTest

        from dashboards.server import APP

        def refuse(url: str) -> Any:
            raise ConnectionRefusedError("connection refused")

        monkeypatch.setattr(source_module, "connect_clickhouse", refuse)
        monkeypatch.delenv(DB_ENV, raising=False)
        monkeypatch.setenv(CLICKHOUSE_ENV, "http://u:secret@nowhere:8123/otel")
        at = AppTest.from_file(str(APP), default_timeout=30)
        at.run()
        assert not at.exception
        assert "Cannot reach" in at.warning[0].value and "secret" not in at.warning[0].value
