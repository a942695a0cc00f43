"""The Trace explorer says why: the model's message, untrusted/injection flags, the tainting call.

On the demo's traffic (the real guard and telemetry), a write held as TAINTED_CONTEXT links to the
read whose untrusted result tainted its session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from analytics import reconstruct
from analytics.load import connect
from dashboards.views import PAGES

from .conftest import make_app
from .helpers import unescape


@pytest.fixture
def demo_con(demo_db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect(demo_db, read_only=True)
    yield connection
    connection.close()


def open_trace(at: AppTest, trace_id: str) -> AppTest:
    at.query_params["page"] = "trace"
    at.query_params["trace"] = trace_id
    at.run()
    assert not at.exception, at.exception
    return at


def _held(con: duckdb.DuckDBPyConnection) -> reconstruct.CallSummary:
    [call] = reconstruct.calls_with_code(con, "TAINTED_CONTEXT", limit=1)
    return call


class TestTaintedWrite:
    def test_links_to_the_call_that_tainted_the_session(
        self, demo_db: Path, demo_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The held write names the earlier untrusted read, its rule, and links to its trace."""
        held = _held(demo_con)
        assert held.session is not None
        source = reconstruct.tainting_call(demo_con, held)
        assert source is not None and source.start_time <= held.start_time
        at = open_trace(make_app(monkeypatch, demo_db), held.trace_id)
        [alert] = [e.value for e in at.error]
        assert "Held: the session read untrusted text" in alert
        text = unescape(alert)
        assert f"step {source.step}, **{source.tool}**" in text
        if source.injection_detected:
            assert f"rule **{source.injection_rule}**" in text
        # The button opens the cause in place: this session, this tab, no second first-render.
        at.button(key="open_taint").click().run()
        assert not at.exception, at.exception
        assert any(source.trace_id in str(h.value) for h in at.subheader)
        assert at.query_params["trace"] in (source.trace_id, [source.trace_id])

    def test_the_tainting_call_shows_its_flags(
        self, demo_db: Path, demo_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Opened from the link, the read says it returned untrusted text, with its rule."""
        held = _held(demo_con)
        assert held.session is not None
        source = reconstruct.tainting_call(demo_con, held)
        assert source is not None
        at = open_trace(make_app(monkeypatch, demo_db), source.trace_id)
        warning = unescape(" ".join(w.value for w in at.warning))
        assert "returned **untrusted** outside text" in warning
        assert held.session in warning
        if source.injection_detected:
            assert f"rule **{source.injection_rule}**" in warning
        assert source.message in [c.value for c in at.code]

    def test_message_the_model_received(
        self, demo_db: Path, demo_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every call shows the message the model received, as a code block (never Markdown)."""
        held = _held(demo_con)
        view = reconstruct.trace(demo_con, held.trace_id)
        assert view is not None
        message = view.roots[0].attributes["guard.message"]
        at = open_trace(make_app(monkeypatch, demo_db), held.trace_id)
        assert "**Message the model received**" in [m.value for m in at.markdown]
        assert message in [c.value for c in at.code]

    def test_no_taint_alert_on_a_plain_call(
        self, demo_db: Path, demo_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An ordinary rejected call gets neither the taint alert nor the untrusted warning."""
        [plain] = reconstruct.calls_with_code(demo_con, "INVALID_ARGUMENTS", limit=1)
        at = open_trace(make_app(monkeypatch, demo_db), plain.trace_id)
        assert not at.error and not at.warning


class TestNoNoneCells:
    def test_no_empty_cells_on_any_page(
        self, demo_db: Path, demo_con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No table on any page (nor a session's calls) shows None or NaN for a missing value."""
        held = _held(demo_con)
        at = make_app(monkeypatch, demo_db)
        at.run()
        seen = 0
        for page in PAGES:
            at.sidebar.radio(key="page").set_value(page.slug).run()
            assert not at.exception
            for frame in (d.value for d in at.dataframe):
                seen += 1
                assert not frame.isna().any().any(), (page.slug, frame.columns.tolist())
        at.sidebar.radio(key="page").set_value("trace").run()
        at.text_input(key="trace_query").set_value(str(held.session)).run()
        for frame in (d.value for d in at.dataframe):
            seen += 1
            assert not frame.isna().any().any(), ("session", frame.columns.tolist())
        assert seen >= 10
