"""``callgate replay FILE``: a scenario through a guard; with ``--check``, a regression test.

Exit status: 0 when every line parsed (and, with ``--check``, every expectation held); 1 when
``--check`` found calls whose code changed; 2 when some lines were malformed (each is reported with
its number and skipped, and the rest still runs).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import click
from rich.console import Console
from rich.table import Table

from guard.replay import Replayer, load_factory, shop_target

__all__ = ["replay"]


@click.command()
@click.argument("scenario", type=click.File("r", encoding="utf-8", errors="surrogateescape"))
@click.option(
    "--app",
    "app",
    default=None,
    metavar="MODULE:FACTORY",
    help="Your own guard: a factory taking the replay clock, returning a Guard or a target.",
)
@click.option("--table", is_flag=True, help="Print a table for people instead of JSON lines.")
@click.option(
    "--check",
    is_flag=True,
    help="Compare each call with its expected code; list the ones that changed, exit 1 if any did.",
)
def replay(scenario: TextIO, app: str | None, table: bool, check: bool) -> None:
    """Run a scenario file of proposed calls (JSON lines) and print one result line per call.

    \b
    Examples:
      callgate replay examples/shop_scenario.jsonl --table
      callgate replay regress.jsonl --check --app mybot.guard:build

    Exit codes: 0 every line parsed (and, with --check, every call decided as expected), 1 --check
    found calls decided differently, 2 malformed lines (each named and skipped) or bad options.
    """
    try:
        factory = load_factory(app) if app else shop_target
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    records = list(Replayer.create(factory).run(scenario))
    summary = records[-1]["summary"]
    shown = [r for r in records if not check or r.get("changed") or "error" in r or "summary" in r]
    if table:
        _print_table(shown)
    else:
        for record in shown:
            click.echo(json.dumps(record, ensure_ascii=False))
    if summary["malformed_lines"]:
        click.echo(f"{summary['malformed_lines']} malformed line(s) skipped", err=True)
    if check:
        click.echo(
            f"{summary['changed']} of {summary['checked']} calls with an expectation changed",
            err=True,
        )
        if summary["changed"]:
            sys.exit(1)
    if summary["malformed_lines"]:
        sys.exit(2)


def _print_table(records: list[dict[str, Any]]) -> None:
    table = Table(title="callgate replay", show_lines=False)
    for column in (
        "call",
        "tool",
        "code",
        "expected",
        "replayed",
        "outcome",
        "message for the model",
    ):
        table.add_column(column, overflow="fold")
    for record in records:
        if "summary" in record or "error" in record:
            continue
        style = "green" if record["ok"] else "red"
        expected = record.get("expected", {}).get("code", "")
        table.add_row(
            str(record["call_id"]),
            str(record["tool"]),
            f"[{style}]{record['code']}[/{style}]",
            f"[yellow]{expected}[/yellow]" if record.get("changed") else expected,
            "yes" if record["replayed"] else "",
            record["outcome"],
            record["message"],
        )
    console = Console(width=max(120, Console().width))
    console.print(table)
    for record in records:
        if "error" in record:
            console.print(f"line {record['line']} skipped: {record['error']}", markup=False)
        if "summary" in record:
            console.print_json(data=record["summary"])
