"""``callgate dashboard``: start the Streamlit dashboard on a DuckDB file or a ClickHouse server."""

from __future__ import annotations

import os
from pathlib import Path

import click

from analytics import database

from .server import start_server
from .settings import DEFAULT_REFRESH_SECONDS, Settings

__all__ = ["DEFAULT_DB", "dashboard"]

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
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--refresh",
    default=DEFAULT_REFRESH_SECONDS,
    show_default=True,
    type=click.IntRange(0),
    help="Auto-refresh interval in seconds the page starts with; 0 starts with it off.",
)
def dashboard(db: Path | None, clickhouse: str | None, host: str, port: int, refresh: int) -> None:
    """Serve the dashboard SREs watch: calls, rejections, recovery, confirmations, latency, traces."""
    if db is not None and clickhouse is not None:
        raise click.UsageError("give one of --db FILE or --clickhouse URL, not both")
    if clickhouse is None and db is None:
        db = Path(os.environ.get("CALLGATE_DB") or DEFAULT_DB)
    if db is not None and not db.exists():
        click.echo(f"note: {db} does not exist yet; the dashboard waits for `callgate load`.")
    settings = Settings(db=str(db) if db else None, clickhouse=clickhouse, refresh_seconds=refresh)
    click.echo(f"callgate dashboard on http://{host}:{port}  ({settings.describe()})")
    process = start_server(
        db=db, clickhouse=clickhouse, host=host, port=port, refresh_seconds=refresh
    )
    try:
        code = process.wait()
    except KeyboardInterrupt:
        process.terminate()
        code = process.wait(timeout=10)
    if code not in (0, -15):
        raise click.exceptions.Exit(code)
