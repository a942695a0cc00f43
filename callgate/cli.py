"""The ``callgate`` command: one group, each package contributing its commands."""

from __future__ import annotations

import json
from typing import Any, TextIO

import click
from rich.console import Console
from rich.table import Table

from guard.replay import Replayer, load_factory, shop_target

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
