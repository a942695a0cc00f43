"""The evidence a responder needs, from a real guard run: masked arguments per call, the flagged
id enumeration, and the text an injection rule matched, in `callgate trace` and the dashboard."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from streamlit.testing.v1 import AppTest

import telemetry
from analytics.cli import trace_command
from analytics.load import connect, load
from dashboards.settings import STORE_ENV
from guard.shop import build_shop
from guard.stores import SQLiteApprovalStore
from guard.testing import ManualClock

KEY = "evidence-test-key"
REFUND = {
    "order_id": "ORD-1001",
    "amount_cents": 2590,
    "currency": "BRL",
    "reason": "damaged",
}


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One session that probes twelve neighbouring order ids, then reads the poisoned policy."""
    tmp = tmp_path_factory.mktemp("evidence")
    trail = telemetry.configure(
        service_name="evidence", trail_dir=tmp / "trail", masking_key=KEY, mask_logs=False
    )
    clock = ManualClock()
    approvals = SQLiteApprovalStore(tmp / "approvals.db")
    shop = build_shop(observer=trail.observer, clock=clock, approvals=approvals)
    session = shop.session("probe", "CUS-1")
    for n in range(9085, 9097):
        session.execute("get_order", json.dumps({"order_id": f"ORD-{n}"}))
    session.execute("search_refund_policy", json.dumps({"query": "refund in full"}))
    buyer = shop.session("buyer", "CUS-1")
    buyer.execute("get_order", json.dumps({"order_id": "ORD-1001"}))
    asked = buyer.execute("refund_order", json.dumps(REFUND))
    assert asked.approval_id is not None
    clock.advance(192)
    assert shop.guard.approve(asked.approval_id, by="agent-7").ok
    approvals.close()
    trail.shutdown()
    database = tmp / "evidence.duckdb"
    con = connect(database)
    try:
        load(con, [tmp / "trail"])
    finally:
        con.close()
    return database


def _session_id(db: Path) -> str:
    con = connect(db, read_only=True)
    try:
        row = con.execute(
            "SELECT session FROM calls WHERE code = 'NOT_FOUND' GROUP BY 1 ORDER BY count(*) DESC"
        ).fetchone()
    finally:
        con.close()
    assert row is not None
    return str(row[0])


class TestSessionView:
    def test_arguments_and_the_enumeration_flag(self, db: Path) -> None:
        """Each row shows its masked arguments, and the run of NOT_FOUND is flagged once."""
        result = CliRunner().invoke(
            trace_command, ["--session", _session_id(db), "--db", str(db)], terminal_width=250
        )
        assert result.exit_code == 0, result.output
        assert "arguments (masked)" in result.output and "ORD-9090" in result.output
        [flag] = [line for line in result.output.splitlines() if "possible id enumeration" in line]
        assert (
            "12 NOT_FOUND calls of get_order" in flag and "ORD-9085" in flag and "ORD-9096" in flag
        )

    def test_the_dashboard_flags_it_too(self, db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The Trace explorer's session view carries the same warning and an arguments column."""
        from tests.dashboards.conftest import make_app

        app: AppTest = make_app(monkeypatch, db)
        app.query_params["page"] = "trace"
        app.query_params["session"] = _session_id(db)
        app.run()
        assert not app.exception, app.exception
        assert any("12 NOT_FOUND calls of get_order" in str(w.value) for w in app.warning)
        assert "arguments (masked)" in app.dataframe[0].value.columns


class TestInjectionEvidence:
    def test_trace_shows_the_matched_text(self, db: Path) -> None:
        """The poisoned policy's trace prints the text that matched, masked and cut."""
        con = connect(db, read_only=True)
        try:
            row = con.execute(
                "SELECT trace_id FROM calls WHERE tool = 'search_refund_policy'"
            ).fetchone()
        finally:
            con.close()
        assert row is not None
        result = CliRunner().invoke(
            trace_command, [str(row[0]), "--db", str(db)], terminal_width=250
        )
        assert result.exit_code == 0, result.output
        [line] = [x for x in result.output.splitlines() if "the text that matched" in x]
        assert "ignore previous instructions" in line.lower()


class TestWhoDecided:
    def test_the_decider_when_and_how_long(self, db: Path) -> None:
        """The approval history says who decided (the keyed hash, labelled), when, and how long
        after the request; never the raw name."""
        con = connect(db, read_only=True)
        try:
            row = con.execute("SELECT trace_id FROM calls WHERE resumed").fetchone()
        finally:
            con.close()
        assert row is not None
        result = CliRunner().invoke(
            trace_command, [str(row[0]), "--db", str(db)], terminal_width=250
        )
        assert result.exit_code == 0, result.output
        [line] = [x for x in result.output.splitlines() if "keyed hash of the approver" in x]
        assert ": approved by p_" in line and "agent-7" not in result.output
        assert "at 2026-01-01 00:03:12 UTC" in line and "192 s after it was asked" in line

    @pytest.mark.parametrize(
        ("key", "label"),
        [(None, "(approvals store)"), (KEY, "(approvals store; matches the span's keyed hash)")],
    )
    def test_the_store_names_the_decider(
        self, db: Path, key: str | None, label: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With --store the name shows, labelled; with the masking key it is checked too."""
        if key is not None:
            monkeypatch.setenv("CALLGATE_MASKING_KEY", key)
        result = _trace_resumed(db, "--store", str(db.parent / "approvals.db"))
        assert result.exit_code == 0, result.output
        [line] = [x for x in result.output.splitlines() if ": approved by" in x]
        assert f"approved by agent-7 {label}" in line, line
        assert "192 s after it was asked" in line

    def test_a_store_changed_after_the_fact_shows_as_a_mismatch(
        self, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store whose decider was rewritten does not pass for the span's decider."""
        forged = tmp_path / "approvals.db"
        shutil.copy(db.parent / "approvals.db", forged)
        forged.chmod(0o600)
        with sqlite3.connect(forged) as conn:
            conn.execute("UPDATE approvals SET decided_by = 'mallory'")
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY)
        result = _trace_resumed(db, "--store", str(forged))
        [line] = [x for x in result.output.splitlines() if ": approved by" in x]
        assert "mallory according to the approvals store, but the span's keyed hash" in line

    @pytest.mark.parametrize("kind", ["missing", "not sqlite"])
    def test_an_unreadable_store_is_a_warning_and_the_hash(
        self, db: Path, tmp_path: Path, kind: str
    ) -> None:
        """A missing or wrong-kind store: one warning line, the trace still prints, exit 0."""
        store = tmp_path / "approvals.db"
        if kind == "not sqlite":
            store.write_text("not a database\n" * 100)
            store.chmod(0o600)
        result = _trace_resumed(db, "--store", str(store))
        assert result.exit_code == 0, result.output
        [warning] = [x for x in result.stderr.splitlines() if x.startswith("warning:")]
        assert str(store) in warning and "keyed hash" in warning
        assert "Traceback" not in result.output
        assert any("keyed hash of the approver" in x for x in result.stdout.splitlines())

    def test_the_trace_explorer_names_the_decider(
        self, db: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The dashboard given the store shows the same named line as the CLI."""
        from tests.dashboards.conftest import make_app

        monkeypatch.setenv(STORE_ENV, str(db.parent / "approvals.db"))
        app: AppTest = make_app(monkeypatch, db)
        app.query_params["page"] = "trace"
        app.query_params["trace"] = _resumed_trace(db)
        app.run()
        assert not app.exception, app.exception
        assert any("approved by agent-7 (approvals store)" in str(c.value) for c in app.caption)


def _resumed_trace(db: Path) -> str:
    con = connect(db, read_only=True)
    try:
        row = con.execute("SELECT trace_id FROM calls WHERE resumed").fetchone()
    finally:
        con.close()
    assert row is not None
    return str(row[0])


def _trace_resumed(db: Path, *args: str) -> Result:
    return CliRunner().invoke(
        trace_command, [_resumed_trace(db), "--db", str(db), *args], terminal_width=250
    )
