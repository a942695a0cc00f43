"""``callgate dashboard``: start the Streamlit dashboard on a DuckDB file or a ClickHouse server."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import click

from analytics import database
from analytics.alerts import RulesError, load_rules
from analytics.options import confirmation_ttl_option

from .server import PortInUseError, check_port, free_port, start_server, stop
from .settings import DEFAULT_REFRESH_SECONDS, Settings

__all__ = ["DEFAULT_DB", "dashboard", "serve_until_stopped"]

DEFAULT_DB = database.DEFAULT_DB
"""The file `callgate load` writes when not told otherwise (defined once, in analytics)."""


@click.command("dashboard")
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="DuckDB file written by `callgate load` (opened read-only). "
    "Default: $CALLGATE_DB or callgate.duckdb, as `callgate load` writes.",
)
@click.option("--clickhouse", metavar="URL", default=None, help="ClickHouse URL instead of --db.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    default=8501,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to bind; 0 picks a free one.",
)
@click.option(
    "--refresh",
    default=DEFAULT_REFRESH_SECONDS,
    show_default=True,
    type=click.IntRange(0),
    help="Auto-refresh interval in seconds the page starts with; 0 starts with it off.",
)
@confirmation_ttl_option
@click.option(
    "--alerts",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Alert rules file (as `callgate alerts --rules`); the Overview shows the firing ones "
    "and marks tiles over a threshold. Default: the built-in rules.",
)
@click.option(
    "--store",
    envvar="CALLGATE_STORE",
    default=None,
    metavar="PATH|URL",
    help="The approvals store (SQLite file or redis:// URL, env CALLGATE_STORE): the Trace "
    "explorer names who decided. Default: deciders show as the span's keyed hash.",
)
def dashboard(
    db: Path | None,
    clickhouse: str | None,
    host: str,
    port: int,
    refresh: int,
    confirmation_ttl: float,
    alerts: Path | None,
    store: str | None,
) -> None:
    """Serve the dashboard SREs watch: calls, rejections, recovery, confirmations, latency, traces.

    \b
    Examples:
      callgate dashboard --db callgate.duckdb
      callgate dashboard --db callgate.duckdb --port 0 --alerts alerts.toml
      callgate dashboard --db callgate.duckdb --store approvals.db
      callgate dashboard --clickhouse http://user:password@127.0.0.1:8123/otel

    Exit codes: 0 stopped (Ctrl-C, SIGTERM), 1 a busy port, an unreadable database or rules
    file, or the server failed, 2 bad options.
    """
    if db is not None and clickhouse is not None:
        raise click.UsageError("give one of --db FILE or --clickhouse URL, not both")
    if clickhouse is None and db is None:
        db = Path(os.environ.get("CALLGATE_DB") or DEFAULT_DB)
    if alerts is not None:
        try:
            load_rules(alerts)
        except RulesError as exc:
            raise click.ClickException(str(exc)) from exc
    if db is not None and db.exists():
        try:  # a wrong file is said now, in one line, not on every page of the browser
            with database.open_database(db):
                pass
        except database.DatabaseError as exc:
            raise click.ClickException(str(exc)) from exc
    if db is not None and not db.exists():
        click.echo(f"note: {db} does not exist yet; the dashboard waits for `callgate load`.")
    try:
        port = port or free_port(host)
        check_port(host, port)
    except PortInUseError as exc:
        raise click.ClickException(str(exc)) from exc
    settings = Settings(
        db=str(db) if db else None,
        clickhouse=clickhouse,
        refresh_seconds=refresh,
        confirmation_ttl_seconds=confirmation_ttl,
        alerts=str(alerts) if alerts else None,
        store=store,
    )
    click.echo(f"callgate dashboard on http://{host}:{port}  ({settings.describe()})")
    process = start_server(
        db=db,
        clickhouse=clickhouse,
        host=host,
        port=port,
        refresh_seconds=refresh,
        confirmation_ttl_seconds=confirmation_ttl,
        alerts=alerts,
        store=store,
    )
    code = serve_until_stopped(process)
    if code not in (0, -signal.SIGTERM, -signal.SIGINT):
        raise click.exceptions.Exit(code)


def serve_until_stopped(process: subprocess.Popen[bytes]) -> int:
    """Wait for the server; on Ctrl-C, SIGTERM or SIGHUP stop it first, so no child is left.

    Without this a ``kill <pid>`` of ``callgate dashboard`` ended the command and left its
    Streamlit child serving the port.
    """
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        stopping.append(signum)
        raise KeyboardInterrupt

    # SIGINT too: a command started in the background by a non-interactive shell inherits SIGINT
    # ignored, and would otherwise never stop on Ctrl-C or `kill -INT`.
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    try:
        return process.wait()
    except KeyboardInterrupt:
        return stop(process)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if process.poll() is None:
            stop(process)
