"""A fixture database made by analytics' own generator and loader, and AppTest on the real script."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
from rich.console import Console
from streamlit.testing.v1 import AppTest

from analytics.load import connect, load
from analytics.synth import Call, generate, write_span_file
from dashboards.server import APP
from dashboards.settings import CLICKHOUSE_ENV, DB_ENV, REFRESH_ENV


def build_db(directory: Path, *, spans: int, seed: int, tag: str = "") -> Path:
    """Generate ``spans`` synthetic spans and load them into ``directory/calls.duckdb``."""
    span_file = write_span_file(
        directory / f"spans-{seed}.jsonl", generate(spans=spans, seed=seed, tag=tag)
    )
    db = directory / "calls.duckdb"
    con = connect(db)
    try:
        load(con, [span_file])
    finally:
        con.close()
    return db


@pytest.fixture(scope="session")
def fixture_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 2,200 calls over three hours, two services, four tools."""
    return build_db(tmp_path_factory.mktemp("dashboards"), spans=20_000, seed=1)


@pytest.fixture
def con(fixture_db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection for computing the expected numbers with analytics."""
    connection = connect(fixture_db, read_only=True)
    yield connection
    connection.close()


def make_app(monkeypatch: pytest.MonkeyPatch, db: Path | str | None) -> AppTest:
    """The dashboard script under AppTest, reading ``db``, auto-refresh off."""
    monkeypatch.delenv(CLICKHOUSE_ENV, raising=False)
    if db is None:
        monkeypatch.delenv(DB_ENV, raising=False)
    else:
        monkeypatch.setenv(DB_ENV, str(db))
    monkeypatch.setenv(REFRESH_ENV, "0")
    return AppTest.from_file(str(APP), default_timeout=30)


@pytest.fixture
def app(fixture_db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The dashboard on the fixture database, not yet run."""
    return make_app(monkeypatch, fixture_db)


HOSTILE_TOOLS: dict[str, str] = {
    "get_order": "![x](http://evil.example/tool.png)",
    "get_refund_status": "[a](javascript:alert(1))",
    "search_refund_policy": '<img src="http://evil.example/h.png" onerror="alert(1)"><b>bold</b>',
    "refund_order": "evil · tool",
}
"""Model-chosen tool names that Markdown or HTML would turn into images, links and markup."""

HOSTILE_SESSION = "s-:red[red]-**bold**-$x^2$-<i>i</i>-www.evil.example-"
HOSTILE_CALL_ID = "[c](http://evil.example/c) :material/home: "
HOSTILE_PRINCIPAL = "p_`tick`_<u>u</u>_"

HOSTILE_STRINGS: tuple[str, ...] = (
    *HOSTILE_TOOLS.values(),
    HOSTILE_SESSION,
    HOSTILE_CALL_ID,
    HOSTILE_PRINCIPAL,
)


def hostile_calls(spans: int, seed: int) -> Iterator[Call]:
    """analytics' synthetic traffic with every name, session, call id and principal hostile."""
    for call in generate(spans=spans, seed=seed):
        yield replace(
            call,
            tool=HOSTILE_TOOLS[call.tool],
            session=HOSTILE_SESSION + call.session,
            call_id=HOSTILE_CALL_ID + call.span_id[:8],
            principal=HOSTILE_PRINCIPAL + call.principal,
            invalid_fields=[
                f"/![f](http://evil.example/{f.strip('/')}.png)" for f in call.invalid_fields
            ],
        )


@pytest.fixture(scope="session")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database whose tool names, sessions, call ids and principals are Markdown and HTML."""
    directory = tmp_path_factory.mktemp("hostile")
    span_file = write_span_file(directory / "spans.jsonl", hostile_calls(6_000, seed=3))
    db = directory / "calls.duckdb"
    con = connect(db)
    try:
        load(con, [span_file])
    finally:
        con.close()
    return db


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's traffic through the real guard and telemetry: tainted sessions included."""
    from callgate.demo import DemoOptions, run_demo

    out = tmp_path_factory.mktemp("demo")
    run = run_demo(
        DemoOptions(sessions=300, seed=7, out=out), Console(file=io.StringIO(), width=120)
    )
    assert run.database is not None and run.load_errors == 0
    return run.database
