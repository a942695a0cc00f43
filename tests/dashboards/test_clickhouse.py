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
