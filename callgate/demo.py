"""`callgate demo`: the main job, end to end, on the embedded default.

Simulated agent traffic goes through the real guard and the real telemetry into span files, loads
into DuckDB, the report prints, and the dashboard starts on 127.0.0.1. With ``otlp`` the traffic is
exported over OTLP to a sidecar that writes the span files, loaded live while the dashboard refreshes.
"""

from __future__ import annotations

import inspect
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

import telemetry
from analytics.database import open_database
from analytics.load import discover_files, load
from callgate.fleet import Fleet, Tally, demo_shop
from guard.stores import ApprovalStore, SQLiteApprovalStore
from telemetry import logfilter
from telemetry.sidecar import OTLPReceiver
from telemetry.trail import SpanFileWriter

__all__ = [
    "DEMO_MASKING_KEY",
    "DemoOptions",
    "DemoRun",
    "callgate_command",
    "default_out",
    "run_demo",
    "show",
]

DEMO_MASKING_KEY = "callgate-demo-key-not-for-production"
"""A fixed key so the demo's pseudonyms are stable across runs; deployments set their own."""


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    sessions: int = 2_000
    seed: int = 7
    out: Path
    otlp: bool = False
    """Export over OTLP to a sidecar started here, loaded live, instead of the local trail."""
    otlp_endpoint: str | None = None
    """Export over OTLP to this collector instead; nothing is loaded locally."""


@dataclass(frozen=True, kw_only=True)
class DemoRun:
    """What a demo run produced."""

    tally: Tally
    spans_dir: Path
    database: Path | None
    store: Path
    """The SQLite approvals store the run's shop kept (who decided each approval, by name)."""
    spans_loaded: int
    load_errors: int
    seconds: float


def default_out() -> Path:
    """A fresh directory per run under ./demo-out."""
    return Path("demo-out") / datetime.now().strftime("run-%Y%m%d-%H%M%S")


def run_demo(
    options: DemoOptions,
    console: Console,
    *,
    while_loading: Callable[[Path], None] | None = None,
) -> DemoRun:
    """Traffic -> span files -> DuckDB. ``while_loading(db)`` runs once the database exists and
    before the traffic starts (the dashboard, in OTLP mode, so it fills live)."""
    started = time.monotonic()
    out = options.out
    spans_dir, database = out / "spans", out / "callgate.duckdb"
    spans_dir.mkdir(parents=True, exist_ok=True)
    receiver: OTLPReceiver | None = None
    endpoint = options.otlp_endpoint
    if options.otlp:
        writer = SpanFileWriter(spans_dir, prefix="sidecar")
        receiver = OTLPReceiver(writer, grpc_port=0, http_port=0).start()
        endpoint = f"http://127.0.0.1:{receiver.grpc_port}"
        console.print(
            f"sidecar listening on 127.0.0.1:{receiver.grpc_port} (gRPC), :{receiver.http_port} (HTTP)"
        )
    handle = telemetry.configure(
        service_name="callgate-demo",
        trail=endpoint is None,
        trail_dir=spans_dir,
        otlp=endpoint is not None,
        otlp_endpoint=endpoint,
        otlp_protocol="grpc",
        metrics=False,
        masking_key=DEMO_MASKING_KEY,
    )
    follower: _Follower | None = None
    if options.otlp:
        with open_database(database, read_only=False):
            pass  # created now, so the dashboard finds a database from the start
        follower = _Follower(database, spans_dir).start()
        if while_loading is not None:
            while_loading(database)
    store = out / "approvals.db"
    # Kept for a month of the run's simulated time, so no decision is purged before it is read.
    approvals = SQLiteApprovalStore(store, retention=30 * 86_400.0)
    try:
        tally = _traffic(options, handle.observer, approvals, console)
    finally:
        approvals.close()
        handle.shutdown()
        # configure() put a masking filter on callgate's loggers and shutdown() leaves it there:
        # take it off, so a demo run inside another program (a test) leaves its logging as it was.
        logfilter.uninstall()
        if receiver is not None:
            receiver.stop()
        if follower is not None:
            follower.stop()
    if options.otlp_endpoint is not None:
        return DemoRun(
            tally=tally,
            spans_dir=spans_dir,
            database=None,
            store=store,
            spans_loaded=0,
            load_errors=0,
            seconds=time.monotonic() - started,
        )
    spans, errors = _load(database, spans_dir, console)
    loaded = spans + (follower.spans if follower else 0)
    errors += follower.errors if follower else 0
    return DemoRun(
        tally=tally,
        spans_dir=spans_dir,
        database=database,
        store=store,
        spans_loaded=loaded,
        load_errors=errors,
        seconds=time.monotonic() - started,
    )


def _load(database: Path, spans_dir: Path, console: Console) -> tuple[int, int]:
    """Load the span files a file at a time, so the bar moves by bytes; (spans, bad lines)."""
    files = discover_files([spans_dir])
    spans = errors = 0
    with open_database(database, read_only=False) as con:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console) as progress:
            total = sum(f.stat().st_size for f in files)
            task = progress.add_task("loading into DuckDB", total=total)
            for path in files:
                report = load(con, [path])
                spans, errors = spans + report.spans, errors + report.errors
                progress.advance(task, path.stat().st_size)
    return spans, errors


def _traffic(
    options: DemoOptions,
    observer: telemetry.OTelObserver,
    approvals: ApprovalStore,
    console: Console,
) -> Tally:
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("agent sessions", total=options.sessions)
        fleet = Fleet(
            sessions=options.sessions, seed=options.seed, observer=observer, approvals=approvals
        )
        return fleet.run(progress=lambda n: progress.advance(task, n))


class _Follower:
    """Loads new spans every second, opening the database only for each short load so that
    readers in other processes (the dashboard opens it read-only) get in between."""

    def __init__(self, database: Path, spans_dir: Path) -> None:
        self.database, self.spans_dir = database, spans_dir
        self.spans = self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="callgate-follow", daemon=True)

    def start(self) -> _Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with open_database(self.database, read_only=False) as con:
                report = load(con, [self.spans_dir])
            self.spans += report.spans
            self.errors += report.errors


INCIDENT_CODES = ("TAINTED_CONTEXT", "TIMEOUT", "IDEMPOTENCY_CONFLICT", "LOOP_DETECTED")
"""What makes a call worth opening first, most interesting first."""


def show(options: DemoOptions, console: Console, *, dashboard: bool, host: str, port: int) -> None:
    """The whole demo for a person at a terminal: progress, summary, report, incident, dashboard."""
    from dashboards.server import check_port, free_port, start_server, stop, wait_until_ready

    port = port or free_port(host)
    if dashboard:
        check_port(host, port)  # PortInUseError now, not after the traffic has run
    url = f"http://{host}:{port}"
    server: subprocess.Popen[bytes] | None = None
    previous = signal.signal(signal.SIGTERM, _exit)  # a terminated demo still stops its dashboard

    def serve(database: Path) -> None:
        nonlocal server
        server = start_server(
            db=database,
            store=database.parent / "approvals.db",
            host=host,
            port=port,
            output=subprocess.DEVNULL,
        )
        wait_until_ready(url, process=server, timeout=60)
        if options.otlp:
            console.print(f"dashboard: [bold]{url}[/bold] (filling live as spans arrive)")

    try:
        run = run_demo(
            options, console, while_loading=serve if dashboard and options.otlp else None
        )
        _summary(run, console)
        if run.database is None:
            return
        _report(run.database, run.store, console)
        _replay_hint(options, run.database, console)
        if not dashboard:
            return
        if server is None:
            serve(run.database)
        console.print(f"\n[bold green]dashboard:[/bold green] {url}   (Ctrl-C to stop)")
        assert server is not None
        server.wait()
    except KeyboardInterrupt:
        console.print("stopping")
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server is not None:
            stop(server)


def callgate_command() -> list[str]:
    """How to run ``callgate`` from the working directory, as the user typed it or can type it.

    ``callgate`` when the one on ``PATH`` is this one; else the script next to this interpreter
    (``.venv/bin/callgate``, relative when it is under the working directory); else
    ``python -m callgate``. The demo prints a next command that must work as shown.
    """
    script = Path(sys.executable).parent / "callgate"
    found = shutil.which("callgate")
    if found is not None and script.exists() and Path(found).resolve() == script.resolve():
        return ["callgate"]
    if script.exists():
        try:
            return [str(script.absolute().relative_to(Path.cwd()))]
        except ValueError:
            return [str(script.absolute())]
    return [sys.executable, "-m", "callgate"]


def _replay_hint(options: DemoOptions, database: Path, console: Console) -> None:
    """The export and replay commands that turn this run into regression tests, as one line each.

    The spans carry customers as pseudonyms keyed with the demo's masking key: the export names
    them back with that key and the ids the run could have used (``CUS-1`` upwards, fewer than one
    per session). ``demo_shop`` rebuilds the default run's orders; a smaller run with the same seed
    has the first of the same seeded orders, so it replays against the same target.
    """
    target = inspect.signature(demo_shop).parameters
    if options.seed != target["seed"].default or options.sessions > target["sessions"].default:
        return  # no factory rebuilds these orders: a replay would report every call as changed
    scenario = database.parent / "scenario.jsonl"
    principals = f"$(printf -- '--principal CUS-%d ' $(seq {max(2, options.sessions)}))"
    export = [*callgate_command(), "export", "--db", str(database), "--scenario", str(scenario)]
    replay = [*callgate_command(), "replay", str(scenario), "--check"]
    commands = [
        f"CALLGATE_MASKING_KEY={DEMO_MASKING_KEY} {shlex.join(export)} {principals}",
        shlex.join([*replay, "--app", "callgate.fleet:demo_shop"]),
    ]
    console.print("\nthe run as regression tests (export, then replay against the demo's shop):")
    for command in commands:
        console.print("  " + command, soft_wrap=True, markup=False, highlight=False)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _summary(run: DemoRun, console: Console) -> None:
    tally = run.tally
    files = sorted(run.spans_dir.glob("*.jsonl*"))
    size = sum(f.stat().st_size for f in files)
    console.print(
        f"\n{tally.sessions} sessions, {len(tally.outcomes)} calls through the guard, "
        f"{tally.side_effects} refunds applied, in {run.seconds:.1f} s"
    )
    console.print(f"span files: {run.spans_dir} ({len(files)} files, {size / 1e6:.1f} MB)")
    if run.database is not None:
        console.print(
            f"database:   {run.database} ({run.spans_loaded} spans loaded, {run.load_errors} bad lines)"
        )


def _report(database: Path, store: Path, console: Console) -> None:
    from analytics import metrics
    from analytics.cli import collect_report, print_report
    from analytics.reconstruct import calls_with_code

    with open_database(database) as con:
        data = collect_report(con, metrics.ALL, k=3, min_calls=20, bucket=None)
        print_report(data, console)
        for code in INCIDENT_CODES:
            found = calls_with_code(con, code, limit=1)
            if found:
                call = found[0]
                console.print(
                    f"\nan incident to open: a {call.tool} call that ended [bold]{code}[/bold] "
                    f"(session {call.session}):"
                )
                _command(console, "trace", call.trace_id, "--db", str(database))
                break
        denied = calls_with_code(con, "CONFIRMATION_DENIED", limit=1)
        if denied:
            call = denied[0]
            console.print(
                f"\na human's decision to open: a {call.tool} call an approver denied "
                f"(who, when and how long after it was asked):"
            )
            _command(console, "trace", call.trace_id, "--db", str(database), "--store", str(store))


def _command(console: Console, *args: str) -> None:
    """One unwrapped line, with the command as this shell can run it."""
    command = shlex.join([*callgate_command(), *args])
    console.print("  " + command, soft_wrap=True, markup=False, highlight=False)
