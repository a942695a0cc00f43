"""How long each dashboard page takes to render on a 1M-span database (goal: under 1 s).

A page render is one full run of the Streamlit script under ``streamlit.testing``'s AppTest: open
the DuckDB file read-only, read the filter options, run the page's analytics queries, build its
charts and tables, close the file. That is the server's share of what a person waits for on every
refresh. ``--browser`` also times each page as a person sees it: headless Debian chromium loads
``?page=<slug>`` from a running server until the script has finished and the charts are drawn.
The database is made with analytics' synthetic generator and loader, unless ``--db`` points at
one. Run: ``.venv/bin/python bench/dashboard.py [--browser]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, and bench/analytics.py would shadow the
# analytics package. Put the repository root there instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from streamlit.testing.v1 import AppTest  # noqa: E402

from analytics import metrics, reconstruct  # noqa: E402
from analytics.load import connect, load  # noqa: E402
from analytics.synth import generate, write_span_file  # noqa: E402
from dashboards.server import APP, free_port, start_server, wait_until_ready  # noqa: E402
from dashboards.settings import DB_ENV, REFRESH_ENV  # noqa: E402
from dashboards.views import PAGES  # noqa: E402

# AppTest runs the script without a server, and Streamlit logs a notice about that on every run.
logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context").addFilter(
    lambda record: "missing ScriptRunContext" not in record.getMessage()
)

GOAL_S = 1.0
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def build(directory: Path, spans: int) -> Path:
    """Generate ``spans`` spans and load them; print how long each step took."""
    started = time.perf_counter()
    span_file = write_span_file(directory / "spans.jsonl", generate(spans=spans, seed=7))
    generated = time.perf_counter()
    db = directory / "calls.duckdb"
    con = connect(db)
    try:
        report = load(con, [span_file])
    finally:
        con.close()
    print(
        f"generated {spans:,} spans in {generated - started:.1f} s; "
        f"loaded {report.spans:,} in {time.perf_counter() - generated:.1f} s"
    )
    return db


def trace_to_open(db: Path) -> str:
    """A rejected call from the worst stuck session: the kind of trace a responder opens."""
    con = connect(db, read_only=True)
    try:
        session = metrics.stuck_sessions(con, limit=1)[0].session
        calls = reconstruct.session_calls(con, session)
        return next((c for c in calls if not c.ok), calls[0]).trace_id
    finally:
        con.close()


def render_times(db: Path, slug: str, runs: int, trace_id: str) -> list[float]:
    """Seconds per full render of page ``slug``, after one warm-up render."""
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["page"] = slug
    if slug == "trace":
        at.query_params["trace"] = trace_id
    at.run()  # warm-up: imports, first open of the file
    if at.exception:
        raise SystemExit(f"{slug}: {at.exception[0].message}")
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - started)
    return times


def browser_times(db: Path, runs: int, trace_id: str) -> dict[str, list[float]]:
    """Seconds from a click on a page's name in the sidebar to that page drawn, in chromium.

    The app is loaded once (Streamlit's frontend boots then, not on every page); each page is
    then opened ``runs`` times by clicking through the sidebar, as a person does.
    """
    from playwright.sync_api import sync_playwright

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict[str, list[float]] = {p.slug: [] for p in PAGES}
    process = start_server(db=db, port=port, refresh_seconds=0, output=subprocess.DEVNULL)
    try:
        wait_until_ready(url, process=process, timeout=60)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            tab = browser.new_page(viewport={"width": 1500, "height": 1100})
            tab.goto(f"{url}/?page=trace&trace={trace_id}")
            tab.get_by_role("heading", name="Trace explorer", exact=True).wait_for()
            tab.wait_for_function(_SETTLED)
            for _ in range(runs):
                for page in PAGES:
                    started = time.perf_counter()
                    tab.locator('[data-testid="stSidebar"] label').get_by_text(
                        page.title, exact=True
                    ).click()
                    tab.get_by_role("heading", name=page.title, exact=True).wait_for()
                    tab.wait_for_function(_SETTLED)
                    out[page.slug].append(time.perf_counter() - started)
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=15)
    return out


_SETTLED = """() => {
    const running = document.querySelector('[data-testid="stStatusWidget"]');
    const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
    return (!running || !running.innerText.includes('Running'))
        && charts.every(c => c.querySelector('canvas, svg'));
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, help="use this callgate database instead of making one")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--browser", action="store_true", help="also time pages in chromium")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="callgate-bench-") as tmp:
        db = args.db or build(Path(tmp), args.spans)
        os.environ[DB_ENV] = str(db)
        os.environ[REFRESH_ENV] = "0"
        con = connect(db, read_only=True)
        try:
            [total] = metrics.overview(con)
            spans = int(con.execute("SELECT count(*) FROM spans").fetchone()[0])  # type: ignore[index]
        finally:
            con.close()
        print(f"database: {spans:,} spans, {total.calls:,} calls, {total.sessions:,} sessions")
        trace_id = trace_to_open(db)
        print(
            f"{'page':<20} {'median':>8} {'max':>8}   (of {args.runs} renders)  goal < {GOAL_S} s"
        )
        worst = 0.0
        for page in PAGES:
            times = render_times(db, page.slug, args.runs, trace_id)
            worst = max(worst, statistics.median(times))
            verdict = "ok" if statistics.median(times) < GOAL_S else "SLOW"
            print(
                f"{page.title:<20} {statistics.median(times):>7.3f}s {max(times):>7.3f}s   {verdict}"
            )
        print(f"slowest page median: {worst:.3f} s ({worst / GOAL_S:.0%} of the 1 s goal)")
        if args.browser:
            print(f"\nin chromium, sidebar click to the page drawn (of {args.runs} visits):")
            measured = browser_times(db, args.runs, trace_id)
            for page in PAGES:
                times = measured[page.slug]
                verdict = "ok" if statistics.median(times) < GOAL_S else "SLOW"
                print(
                    f"{page.title:<20} {statistics.median(times):>7.3f}s {max(times):>7.3f}s   {verdict}"
                )


if __name__ == "__main__":
    main()
