"""How long each dashboard page takes to render on a 1M-span database (goal: under 1 s).

A page render is one full run of the Streamlit script under ``streamlit.testing``'s AppTest: open
the DuckDB file read-only, read the filter options, run the page's analytics queries, build its
charts and tables, close the file. That is the server's share of what a person waits for on every
refresh. ``--browser`` also times each page as a person sees it: headless Debian chromium loads
``?page=<slug>`` from a running server until the script has finished and the charts are drawn.
The database is made with analytics' synthetic generator and loader, unless ``--db`` points at
one. ``--fresh`` times each page's first render in a new chromium session, as a link opened from a
ticket is (``--shots DIR`` saves each page as drawn), and the slowest AppTest page is broken down
by analytics query. Run: ``.venv/bin/python bench/dashboard.py [--browser] [--fresh]``.
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
from collections.abc import Callable
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
from dashboards.server import (  # noqa: E402
    APP,
    free_port,
    start_server,
    streamlit_command,
    wait_until_ready,
)
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


def fresh_session_times(
    db: Path, runs: int, trace_id: str, shots: Path | None
) -> dict[str, list[float]]:
    """Seconds from opening ``?page=<slug>`` in a new browser session to the page drawn.

    What a person feels opening a link from a chat message or a ticket: a new browser context
    (no cookies, no Streamlit session, its frontend booted from scratch) per visit. With
    ``shots``, the first visit of each page is saved there as a PNG to look at.
    """
    from playwright.sync_api import sync_playwright

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out: dict[str, list[float]] = {p.slug: [] for p in PAGES}
    out[BLANK] = []
    process = start_server(db=db, port=port, refresh_seconds=0, output=subprocess.DEVNULL)
    blank_port = free_port()
    blank = _blank_server(db.parent, blank_port)
    try:
        wait_until_ready(url, process=process, timeout=60)
        wait_until_ready(f"http://127.0.0.1:{blank_port}", process=blank, timeout=60)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for visit in range(runs):
                # The baseline, in the same run: Streamlit's frontend booting in a new session
                # and drawing one heading, which no page of ours can be faster than.
                context = browser.new_context(viewport={"width": 1500, "height": 1100})
                tab = context.new_page()
                started = time.perf_counter()
                tab.goto(f"http://127.0.0.1:{blank_port}/")
                tab.get_by_role("heading", name="Blank", exact=True).wait_for(timeout=120_000)
                tab.wait_for_function(_SETTLED, timeout=120_000)
                out[BLANK].append(time.perf_counter() - started)
                context.close()
                for page in PAGES:
                    context = browser.new_context(viewport={"width": 1500, "height": 1100})
                    tab = context.new_page()
                    link = f"{url}/?page={page.slug}"
                    if page.slug == "trace":
                        link += f"&trace={trace_id}"
                    started = time.perf_counter()
                    tab.goto(link)
                    tab.get_by_role("heading", name=page.title, exact=True).wait_for(
                        timeout=120_000
                    )
                    tab.wait_for_function(_SETTLED, timeout=120_000)
                    out[page.slug].append(time.perf_counter() - started)
                    if shots is not None and visit == 0:
                        shots.mkdir(parents=True, exist_ok=True)
                        tab.screenshot(path=str(shots / f"{page.slug}.png"), full_page=True)
                    context.close()
            browser.close()
    finally:
        for server in (process, blank):
            server.terminate()
            server.wait(timeout=15)
    return out


BLANK = "blank"
"""The baseline page's key in :func:`fresh_session_times`' answer."""


def _blank_server(directory: Path, port: int) -> subprocess.Popen[bytes]:
    """A Streamlit server, started as the dashboard's is, whose script draws one heading."""
    script = directory / "blank_page.py"
    script.write_text('import streamlit as st\n\nst.header("Blank")\n')
    command = [
        str(script) if part == str(APP) else part
        for part in streamlit_command(host="127.0.0.1", port=port)
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def where_time_goes(slug: str, trace_id: str) -> tuple[float, list[tuple[str, float, int]]]:
    """One render of ``slug`` under AppTest with every ``dashboards.data`` function timed:
    (seconds for the render, [(function, seconds, calls)] slowest first). The rest of the
    render is Streamlit building the page (charts, tables)."""
    import dashboards.data as data_module

    spent: dict[str, list[float]] = {}
    originals = {
        name: fn
        for name in data_module.__all__
        if callable(fn := getattr(data_module, name)) and not isinstance(fn, type)
    }

    def timed(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def wrapper(*args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent.setdefault(name, []).append(time.perf_counter() - started)

        return wrapper

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["page"] = slug
    if slug == "trace":
        at.query_params["trace"] = trace_id
    at.run()  # warm-up
    for name, fn in originals.items():
        setattr(data_module, name, timed(name, fn))
    try:
        started = time.perf_counter()
        at.run()
        total = time.perf_counter() - started
    finally:
        for name, fn in originals.items():
            setattr(data_module, name, fn)
    rows = sorted(((n, sum(t), len(t)) for n, t in spent.items()), key=lambda r: -r[1])
    return total, rows


_SETTLED = """() => {
    // Drawn: the script has finished (the status widget, "Running"/"Stop", is gone), no element
    // is still a grey skeleton, and every chart has its canvas or svg.
    const running = document.querySelector('[data-testid="stStatusWidget"]');
    const skeletons = document.querySelectorAll('[data-testid="stSkeleton"]').length;
    const charts = [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')];
    return !running && skeletons === 0 && charts.every(c => c.querySelector('canvas, svg'));
}"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--db", type=Path, help="use this callgate database instead of making one")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--browser", action="store_true", help="also time pages in chromium")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="also time each page's first render in a new chromium session (a link opened)",
    )
    parser.add_argument("--shots", type=Path, help="with --fresh: save each page's PNG here")
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
        rendered: dict[str, list[float]] = {}
        for page in PAGES:
            times = rendered[page.slug] = render_times(db, page.slug, args.runs, trace_id)
            worst = max(worst, statistics.median(times))
            verdict = "ok" if statistics.median(times) < GOAL_S else "SLOW"
            print(
                f"{page.title:<20} {statistics.median(times):>7.3f}s {max(times):>7.3f}s   {verdict}"
            )
        print(f"slowest page median: {worst:.3f} s ({worst / GOAL_S:.0%} of the 1 s goal)")
        slowest = max(PAGES, key=lambda p: statistics.median(rendered[p.slug]))
        total, rows = where_time_goes(slowest.slug, trace_id)
        print(f"\nwhere {slowest.title}'s {total:.3f} s render goes (analytics queries):")
        for name, seconds, count in rows:
            print(f"  data.{name:<28} {seconds:>7.3f}s  {count} call(s)")
        queries = sum(r[1] for r in rows)
        print(f"  {'the rest: Streamlit drawing':<33} {total - queries:>7.3f}s")
        if args.fresh:
            print(
                f"\nin a new chromium session per visit, link opened to page drawn ({args.runs}):"
            )
            first = fresh_session_times(db, args.runs, trace_id, args.shots)
            print(f"{'page':<20} {'first':>8} {'median':>8} {'max':>8}")
            base = first[BLANK]
            print(
                f"{'(blank page)':<20} {base[0]:>7.3f}s {statistics.median(base):>7.3f}s "
                f"{max(base):>7.3f}s   Streamlit's own boot: the baseline"
            )
            for page in PAGES:
                times = first[page.slug]
                print(
                    f"{page.title:<20} {times[0]:>7.3f}s {statistics.median(times):>7.3f}s "
                    f"{max(times):>7.3f}s"
                )
            slow = max(PAGES, key=lambda p: statistics.median(first[p.slug]))
            worst_first = statistics.median(first[slow.slug])
            print(
                f"slowest first render: {slow.title}, {worst_first:.3f} s median, "
                f"{worst_first / statistics.median(base):.1f}x the blank page"
            )
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
