"""The ``callgate`` command: one group, each package contributing its commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

import click
from rich.console import Console
from rich.table import Table

from analytics.cli import export_command, load_command, report_command, trace_command
from callgate.evaluation.cli import eval_command
from dashboards.cli import dashboard
from guard.replay import Replayer, load_factory, shop_target
from telemetry.cli import sidecar

__all__ = ["main"]


@click.group()
@click.version_option(package_name="callgate")
def main() -> None:
    """callgate: a deterministic, observable gate between an agent's tool calls and your APIs."""


@main.command()
@click.argument("scenario", type=click.File("r"))
@click.option(
    "--app",
    "app",
    default=None,
    metavar="MODULE:FACTORY",
    help="Your own guard: a factory taking the replay clock, returning a Guard or a target.",
)
@click.option("--table", is_flag=True, help="Print a table for people instead of JSON lines.")
def replay(scenario: TextIO, app: str | None, table: bool) -> None:
    """Run a scenario file of proposed calls (JSON lines) and print one result line per call."""
    factory = load_factory(app) if app else shop_target
    records = Replayer.create(factory).run(scenario)
    if table:
        _print_table(list(records))
        return
    for record in records:
        click.echo(json.dumps(record, ensure_ascii=False))


for command in (
    sidecar,
    load_command,
    report_command,
    trace_command,
    export_command,
    dashboard,
    eval_command,
):
    main.add_command(command)


def _print_table(records: list[dict[str, Any]]) -> None:
    table = Table(title="callgate replay", show_lines=False)
    for column in ("call", "tool", "code", "replayed", "outcome", "message for the model"):
        table.add_column(column, overflow="fold")
    for record in records:
        if "summary" in record or "error" in record:
            continue
        style = "green" if record["ok"] else "red"
        table.add_row(
            str(record["call_id"]),
            str(record["tool"]),
            f"[{style}]{record['code']}[/{style}]",
            "yes" if record["replayed"] else "",
            record["outcome"],
            record["message"][:140],
        )
    console = Console()
    console.print(table)
    for record in records:
        if "error" in record:
            console.print(f"[yellow]line {record['line']} skipped: {record['error']}[/yellow]")
        if "summary" in record:
            console.print_json(data=record["summary"])


@main.command()
@click.option("--sessions", default=2_000, show_default=True, help="Agent sessions to simulate.")
@click.option(
    "--seed", default=7, show_default=True, help="Seed: the same seed gives the same traffic."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where span files and the DuckDB file go (default: a fresh demo-out/run-... directory).",
)
@click.option(
    "--no-dashboard", is_flag=True, help="Print the report and stop; do not serve the dashboard."
)
@click.option(
    "--otlp", is_flag=True, help="Export over OTLP to a sidecar started here; DuckDB fills live."
)
@click.option(
    "--otlp-endpoint",
    default=None,
    metavar="URL",
    help="Export over OTLP to this collector instead (nothing is loaded locally).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the dashboard binds.")
@click.option("--port", default=8501, show_default=True, help="Dashboard port (0: a free one).")
def demo(
    sessions: int,
    seed: int,
    out: Path | None,
    no_dashboard: bool,
    otlp: bool,
    otlp_endpoint: str | None,
    host: str,
    port: int,
) -> None:
    """Simulated agent traffic through the guard, into span files and DuckDB; report; dashboard."""
    from callgate.demo import DemoOptions, default_out, show

    if otlp and otlp_endpoint:
        raise click.UsageError(
            "--otlp starts a local sidecar; --otlp-endpoint names another: pick one"
        )
    options = DemoOptions(
        sessions=sessions,
        seed=seed,
        out=out or default_out(),
        otlp=otlp,
        otlp_endpoint=otlp_endpoint,
    )
    show(
        options,
        Console(),
        dashboard=not no_dashboard and otlp_endpoint is None,
        host=host,
        port=port,
    )
