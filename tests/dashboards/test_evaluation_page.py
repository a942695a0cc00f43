"""The Evaluation page: stored `callgate eval` runs over time and the cases that changed, under
AppTest and in the real browser."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from playwright.sync_api import Browser, Page
from streamlit.testing.v1 import AppTest

from analytics.evals import eval_runs
from callgate.cli import main
from dashboards import free_port, start_server, wait_until_ready
from dashboards.fmt import rate

from ..evaluation.cases import WORKED, write
from .conftest import build_db, make_app
from .test_browser import browser, open_page

__all__ = ["browser"]


@pytest.fixture(scope="module")
def eval_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Spans, and two stored runs of the worked example: v2 fixes the wrong-unit refund."""
    directory = tmp_path_factory.mktemp("evaluation")
    db = build_db(directory, spans=2_000, seed=5)
    fixed = [c | {"observed": c["expected"]} if c["id"] == "units" else c for c in WORKED]
    for name, cases in (("v1", WORKED), ("v2", fixed)):
        path = write(directory / f"{name}.jsonl", cases)
        result = CliRunner().invoke(main, ["eval", str(path), "--db", str(db), "--name", name])
        assert result.exit_code == 0, result.output
    return db


def open_evaluation(at: AppTest) -> AppTest:
    at.run()
    at.sidebar.radio(key="page").set_value("evaluation").run()
    assert not at.exception, at.exception
    return at


class TestAppTest:
    def test_newest_run_and_changes(self, eval_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """The tiles are the newest run's rates; the table lists both runs; `units` changed."""
        at = open_evaluation(make_app(monkeypatch, eval_db))
        with duckdb.connect(str(eval_db), read_only=True) as con:
            runs = eval_runs(con)
        tiles = {m.label: m.value for m in at.metric}
        assert tiles["valid arguments"] == rate(runs[-1].rates["argument_validity"]) == "85.7%"
        assert tiles["precision"] == rate(4 / 7)
        captions = [str(c.value) for c in at.caption]
        counted = runs[-1].counts["precision"]
        assert (counted.numerator, counted.denominator) == (4, 7)
        assert any(c.startswith("4 of 7 · 95% CI ") for c in captions), captions
        per_run = at.dataframe[0].value.to_dict("records")
        assert [r["name"] for r in per_run] == ["v2", "v1"]
        changed = at.dataframe[1].value.to_dict("records")
        assert [c["case"] for c in changed] == ["units"]
        assert (
            changed[0]["before (share as expected)"] == "0.0%" and changed[0]["after"] == "100.0%"
        )
        assert not at.error and not at.warning

    def test_no_runs_yet(self, fixture_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """A database without evaluation runs says how to store one, and shows no numbers."""
        at = open_evaluation(make_app(monkeypatch, fixture_db))
        assert "callgate eval CASES.jsonl --db FILE" in at.info[0].value
        assert not at.metric


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, eval_db: Path) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("eval-server") / "streamlit.log"
    with log_path.open("wb") as log:
        process = start_server(db=eval_db, port=port, refresh_seconds=0, output=log)
        try:
            wait_until_ready(f"http://127.0.0.1:{port}", process=process, timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=15)


class TestBrowser:
    def test_the_page_in_chromium(self, browser: Browser, server: str, tmp_path: Path) -> None:
        """Rendered in Chromium: the six tiles, the chart, and both tables; a screenshot is kept."""
        page: Page = browser.new_page(viewport={"width": 1500, "height": 1400})
        try:
            open_page(page, server, "page=evaluation", "Evaluation")
            tiles = page.locator('[data-testid="stMetric"]')
            assert tiles.count() == 6
            assert "85.7%" in tiles.nth(3).inner_text()
            page.locator("canvas, svg.marks").first.wait_for(timeout=15_000)
            # the per-run table and the changed cases (data grids draw on a canvas: counted here,
            # read under AppTest above)
            page.locator('[data-testid="stDataFrame"]').nth(1).wait_for(timeout=15_000)
            assert page.get_by_text("Cases that changed between two runs").count() == 1
            page.screenshot(path=str(tmp_path / "evaluation.png"), full_page=True)
            assert (tmp_path / "evaluation.png").stat().st_size > 10_000
        finally:
            page.close()
