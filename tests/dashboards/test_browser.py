"""The dashboard in a real browser: Debian's chromium, headless, driven by Playwright.

No browser is downloaded: Playwright drives /usr/bin/chromium (``make test`` installs it). A
missing chromium fails the test with instructions; it is never skipped silently.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import duckdb
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from analytics import metrics, reconstruct
from analytics.load import connect, load
from analytics.metrics import Filters
from analytics.synth import generate, write_span_file
from dashboards import free_port, start_server, wait_until_ready
from dashboards.server import stop
from dashboards.views import PAGES

from .conftest import HOSTILE_CALL_ID, HOSTILE_SESSION
from .helpers import assert_same, expected_overview, shown

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@contextmanager
def serving(db: Path, directory: Path) -> Iterator[str]:
    """The dashboard on ``db`` on a free 127.0.0.1 port, auto-refresh off so readings are stable."""
    port = free_port()
    with (directory / "streamlit.log").open("wb") as log:
        process = start_server(db=db, port=port, refresh_seconds=0, output=log)
        try:
            wait_until_ready(f"http://127.0.0.1:{port}", process=process, timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process, timeout=15)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, fixture_db: Path) -> Iterator[str]:
    """The dashboard on the synthetic fixture database."""
    with serving(fixture_db, tmp_path_factory.mktemp("server")) as url:
        yield url


@pytest.fixture(scope="module")
def hostile_server(tmp_path_factory: pytest.TempPathFactory, hostile_db: Path) -> Iterator[str]:
    """The dashboard on the database of Markdown and HTML names."""
    with serving(hostile_db, tmp_path_factory.mktemp("hostile-server")) as url:
        yield url


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory, demo_db: Path) -> Iterator[str]:
    """The dashboard on the demo's traffic (the real guard and telemetry)."""
    with serving(demo_db, tmp_path_factory.mktemp("demo-server")) as url:
        yield url


def screenshots(tmp_path: Path, name: str) -> Path:
    """Where a test keeps its screenshots: $CALLGATE_SCREENSHOTS/<name> if set, else tmp_path."""
    root = os.environ.get("CALLGATE_SCREENSHOTS")
    directory = Path(root) / name if root else tmp_path / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Debian chromium; fails (does not skip) when it is not installed."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`; "
            "`make test` does it) to run the dashboard's browser test."
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh tab, wide enough for the six headline tiles."""
    tab = browser.new_page(viewport={"width": 1500, "height": 1100})
    yield tab
    tab.close()


def open_page(page: Page, server: str, query: str, title: str) -> None:
    """Load ``?query`` and wait until the page's header is drawn and the script stopped."""
    page.goto(f"{server}/?{query}")
    page.get_by_role("heading", name=title, exact=True).wait_for(timeout=30_000)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " || !document.querySelector('[data-testid=\"stStatusWidget\"]').innerText"
        ".includes('Running')",
        timeout=30_000,
    )
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(800)  # let Vega and the code highlighter finish painting


_DRAWN = """() => {
    const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
    const grids = [...document.querySelectorAll('[data-testid="stDataFrame"]')];
    const code = [...document.querySelectorAll('[data-testid="stCode"]')];
    return charts.every(c => c.querySelector('canvas, svg'))
        && grids.every(g => g.querySelector('canvas, table'))
        && code.every(c => c.querySelector('pre, code'));
}"""


def snap(page: Page, path: Path) -> None:
    """A screenshot of the whole page: Streamlit scrolls inside its main block, so the viewport is
    stretched to the main block's height first (a plain full-page shot stops at the fold)."""
    height = int(
        page.evaluate(
            "() => Math.max(...['stMain', 'stMainBlockContainer', 'stAppViewContainer']"
            '.map(id => document.querySelector(`[data-testid="${id}"]`))'
            ".filter(Boolean).map(e => e.scrollHeight), document.body.scrollHeight)"
        )
    )
    size = page.viewport_size or {"width": 1500, "height": 1100}
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], height + 40)})
    page.wait_for_load_state("networkidle")
    page.wait_for_function(_DRAWN, timeout=30_000)
    page.wait_for_timeout(1200)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


class TestBrowser:
    def test_overview_numbers_equal_analytics(
        self, page: Page, server: str, fixture_db: Path, tmp_path: Path
    ) -> None:
        """The six numbers read from the rendered Overview are analytics' numbers."""
        open_page(page, server, "page=overview", "Overview")
        tiles = page.locator('[data-testid="stMetric"]')
        tiles.nth(5).wait_for()
        readings = {
            tiles.nth(i).locator('[data-testid="stMetricLabel"]').inner_text().strip(): tiles.nth(i)
            .locator('[data-testid="stMetricValue"]')
            .inner_text()
            .strip()
            for i in range(tiles.count())
        }
        con = duckdb.connect(str(fixture_db), read_only=True)
        try:
            expected = expected_overview(con, Filters())
        finally:
            con.close()
        assert_same(shown(readings), expected)
        snap(page, tmp_path / "overview.png")

    def test_trace_opened_by_id_shows_its_stages(
        self, page: Page, server: str, fixture_db: Path, tmp_path: Path
    ) -> None:
        """A trace opened by id lists its stages in pipeline order with the rejecting code."""
        con = duckdb.connect(str(fixture_db), read_only=True)
        try:
            session = metrics.stuck_sessions(con, limit=1)[0].session
            rejected = next(c for c in reconstruct.session_calls(con, session) if not c.ok)
            view = reconstruct.trace(con, rejected.trace_id)
        finally:
            con.close()
        assert view is not None
        stages = [child.stage for child in view.roots[0].children]
        open_page(page, server, f"page=trace&trace={rejected.trace_id}", "Trace explorer")
        table = page.locator('[data-testid="stTable"] table').first
        table.wait_for(timeout=30_000)
        rows = [row.locator("td").all_inner_texts() for row in table.locator("tbody tr").all()]
        assert [cells[0] for cells in rows] == [f"execute_tool {rejected.tool}", *stages]
        assert [cells[1] for cells in rows][1:] == ["pass"] * (len(stages) - 1) + ["reject"]
        assert rows[-1][2] == rejected.code
        snap(page, tmp_path / "trace.png")

    def test_screenshot_of_every_page(self, page: Page, server: str, tmp_path: Path) -> None:
        """Every page renders in the browser without an exception; a screenshot of each is kept."""
        shots = screenshots(tmp_path, "fixture")
        for entry in PAGES:
            open_page(page, server, f"page={entry.slug}", entry.title)
            assert page.locator('[data-testid="stException"]').count() == 0, entry.slug
            assert_polished(page, entry.slug)
            snap(page, shots / f"{entry.slug}.png")
        assert {p.stem for p in shots.iterdir()} >= {p.slug for p in PAGES}

    def test_demo_pages_and_a_tainted_write(
        self, page: Page, demo_server: str, demo_db: Path, tmp_path: Path
    ) -> None:
        """On the demo's traffic: every page, and a TAINTED_CONTEXT write linking to its cause."""
        shots = screenshots(tmp_path, "demo")
        for entry in PAGES:
            open_page(page, demo_server, f"page={entry.slug}", entry.title)
            assert page.locator('[data-testid="stException"]').count() == 0, entry.slug
            assert_polished(page, entry.slug)
            snap(page, shots / f"{entry.slug}.png")
        con = duckdb.connect(str(demo_db), read_only=True)
        try:
            [held] = reconstruct.calls_with_code(con, "TAINTED_CONTEXT", limit=1)
            assert held.session is not None
            source = reconstruct.tainting_call(con, held)
        finally:
            con.close()
        assert source is not None
        open_page(page, demo_server, f"page=trace&trace={held.trace_id}", "Trace explorer")
        alert = page.locator('[data-testid="stAlertContentError"]').first
        expect(alert).to_contain_text("Held: the session read untrusted text")
        snap(page, shots / "trace-tainted.png")
        tabs = len(page.context.pages)
        page.get_by_role("button", name="Open the call that tainted the session").click()
        cause = page  # in place: the same tab and Streamlit session, no new first render
        cause.get_by_role("heading", name=f"Trace {source.trace_id}").wait_for(timeout=30_000)
        assert len(page.context.pages) == tabs
        assert f"trace={source.trace_id}" in cause.url
        expect(cause.locator('[data-testid="stAlertContentWarning"]').first).to_contain_text(
            "untrusted"
        )
        cause.wait_for_timeout(800)
        snap(cause, shots / "trace-tainting-read.png")


_NO_LIVE_MARKUP = """() => {
    const main = document.querySelector('[data-testid="stMain"]') || document.body;
    const bad = [];
    for (const el of document.querySelectorAll('img, a, [onerror], script, b, i, u, .katex')) {
        const src = el.getAttribute('src') || '', href = el.getAttribute('href') || '';
        if (el.tagName === 'IMG' && src.includes('evil')) bad.push('img ' + src);
        if (el.tagName === 'A' && !href.startsWith('?') && !href.startsWith('#')
            && !href.startsWith('/') && !href.startsWith('http://127.0.0.1')) bad.push('a ' + href);
        if (el.hasAttribute('onerror')) bad.push('onerror');
        if (['B', 'I', 'U'].includes(el.tagName)) bad.push(el.tagName + ' ' + el.innerText);
        if (el.classList.contains('katex') && main.contains(el)) bad.push('math ' + el.innerText);
    }
    for (const el of main.querySelectorAll('[data-testid="stMarkdownContainer"] span[style]')) {
        if ((el.getAttribute('style') || '').includes('color')) bad.push('colour ' + el.innerText);
    }
    return bad;
}"""


def assert_no_live_markup(page: Page, where: str) -> None:
    """No image, foreign link, HTML element, maths or coloured text came from the names."""
    assert page.evaluate(_NO_LIVE_MARKUP) == [], where


_CUT_OR_NONE = """() => {
    const texts = [];
    for (const el of document.querySelectorAll('svg text')) texts.push(el.textContent);
    const cells = [];
    for (const el of document.querySelectorAll('[data-testid="stTable"] td')) cells.push(el.innerText);
    return {texts, cells};
}"""


def assert_polished(page: Page, where: str) -> None:
    """No e-notation or cut ("…") chart text, no "None" in static tables."""
    found = page.evaluate(_CUT_OR_NONE)
    for text in found["texts"]:
        assert not re.fullmatch(r"-?[\d.]+e[-+]?\d+", text.strip()), (where, text)
        assert "…" not in text, (where, text)
    assert "None" not in found["cells"], where


class TestHostileNamesInTheBrowser:
    def test_every_page_renders_them_as_text(
        self, page: Page, hostile_server: str, hostile_db: Path, tmp_path: Path
    ) -> None:
        """In Chromium's DOM: no remote image, no javascript: link, no HTML from span values."""
        shots = screenshots(tmp_path, "hostile")
        for entry in PAGES:
            open_page(page, hostile_server, f"page={entry.slug}", entry.title)
            assert page.locator('[data-testid="stException"]').count() == 0, entry.slug
            assert_no_live_markup(page, entry.slug)
            snap(page, shots / f"{entry.slug}.png")
        con = duckdb.connect(str(hostile_db), read_only=True)
        try:
            (session,) = con.execute("SELECT min(session) FROM calls").fetchone() or ("",)
            call = reconstruct.session_calls(con, session)[0]
        finally:
            con.close()
        open_page(
            page,
            hostile_server,
            f"page=trace&{urlencode({'trace': call.trace_id})}",
            "Trace explorer",
        )
        assert_no_live_markup(page, "trace")
        main = page.locator('[data-testid="stMain"]')
        expect(main).to_contain_text(HOSTILE_SESSION)
        expect(main).to_contain_text(str(call.tool))
        shown = main.inner_text().replace("\u2060", "")  # the word joiner safe.text adds
        assert HOSTILE_CALL_ID.strip() in shown
        snap(page, shots / "trace-call.png")

    def test_reflected_url_parameter(self, page: Page, hostile_server: str, tmp_path: Path) -> None:
        """A link with ?trace=<markdown> shows the text in "Nothing found", nothing rendered."""
        payload = "![x](http://evil.example/r.png) [a](javascript:alert(1)) <b>b</b> :red[r]"
        open_page(
            page, hostile_server, urlencode({"page": "trace", "trace": payload}), "Trace explorer"
        )
        assert_no_live_markup(page, "reflected")
        expect(page.locator('[data-testid="stAlertContentWarning"]')).to_contain_text(payload)
        snap(page, screenshots(tmp_path, "hostile") / "reflected.png")


class TestAutoRefresh:
    def test_page_follows_a_filling_database(
        self, browser: Browser, fixture_db: Path, tmp_path: Path
    ) -> None:
        """With auto-refresh on, spans loaded while the page is open appear without a reload."""
        db = tmp_path / "growing.duckdb"
        shutil.copy(fixture_db, db)
        port = free_port()
        with (tmp_path / "streamlit.log").open("wb") as log:
            process = start_server(db=db, port=port, refresh_seconds=5, output=log)
            try:
                url = f"http://127.0.0.1:{port}"
                wait_until_ready(url, process=process, timeout=60)
                tab = browser.new_page(viewport={"width": 1500, "height": 1100})
                open_page(tab, url, "page=overview", "Overview")
                calls = tab.locator('[data-testid="stMetricValue"]').first
                before = calls.inner_text()
                _load_more(db, tmp_path)
                expected = f"{_calls_in(db):,}"
                assert expected != before
                expect(calls).to_have_text(expected, timeout=20_000)
                tab.close()
            finally:
                process.terminate()
                process.wait(timeout=15)


def _load_more(db: Path, directory: Path) -> None:
    """Load another batch of spans, as `callgate load --follow` would, while the page is open."""
    more = write_span_file(directory / "more.jsonl", generate(spans=3_000, seed=11, tag="c"))
    for _ in range(50):  # the dashboard holds the file only while it renders
        try:
            writer = connect(db)
            break
        except duckdb.IOException:
            time.sleep(0.1)
    else:
        raise AssertionError("the dashboard never let go of the database file")
    try:
        load(writer, [more])
    finally:
        writer.close()


def _calls_in(db: Path) -> int:
    reader = connect(db, read_only=True)
    try:
        return metrics.overview(reader)[0].calls
    finally:
        reader.close()
