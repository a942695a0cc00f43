"""``callgate codes``: every reason code a guard can answer with, core and the deployment's own."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from guard import DomainCode, Guard
from guard.replay import load_factory, shop_target
from guard.testing import ManualClock

__all__ = ["code_rows", "codes_command"]


def code_rows(guard: Guard) -> list[dict[str, Any]]:
    """One row per code the guard knows: spelling, stage, fixable, origin, phrase, advice."""
    return [
        {
            "code": str(code),
            "stage": code.stage,
            "fixable": code.fixable,
            "origin": "domain" if isinstance(code, DomainCode) else "core",
            "phrase": code.phrase,
            "advice": code.advice,
        }
        for code in guard.registry.codes.values()
    ]


@click.command("codes")
@click.option(
    "--app",
    "app",
    default=None,
    metavar="MODULE:FACTORY",
    help="Your guard: a factory taking a clock, returning a Guard or a target with .guard "
    "(the shop when absent).",
)
@click.option("--domain", is_flag=True, help="Only the deployment's own codes.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines for machines.")
def codes_command(app: str | None, domain: bool, as_json: bool) -> None:
    """List the reason codes a guard can answer with: stage, fixable, phrase and advice.

    \b
    Examples:
      callgate codes
      callgate codes --app examples.retail.app:build_retail --domain --json

    Exit codes: 0 listed, 2 bad options or an --app that cannot be imported.
    """
    try:
        factory = load_factory(app) if app else shop_target
        target = factory(ManualClock())
    except (ValueError, ImportError, AttributeError) as error:
        raise click.UsageError(f"--app: {error}") from error
    guard = target if isinstance(target, Guard) else getattr(target, "guard", None)
    if not isinstance(guard, Guard):
        raise click.UsageError(f"--app {app}: the factory returned neither a Guard nor a target")
    rows = [row for row in code_rows(guard) if row["origin"] == "domain" or not domain]
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, ensure_ascii=False))
        return
    table = Table("code", "stage", "fixable", "origin", "phrase", "advice")
    for row in rows:
        table.add_row(
            row["code"],
            row["stage"],
            "yes" if row["fixable"] else "no",
            row["origin"],
            row["phrase"],
            row["advice"],
        )
    Console(width=200).print(table)
