"""``callgate eval CASES.jsonl``: tool-call precision, recall, abstention, argument validity and
correctness, and unauthorised-call prevention, with the counts and Wilson intervals behind each.

Exit status: 0 when every adversarial call was stopped and every line parsed; 1 when unauthorised-call
prevention is below 100% (the one target that is absolute); 2 when some case lines were malformed
(they are listed with their line numbers and skipped, and the rest is still scored).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import click
from rich.console import Console
from rich.table import Table

from callgate.evaluation.baseline import compare
from callgate.evaluation.cases import load_cases
from callgate.evaluation.model import ChatModel
from callgate.evaluation.runner import Evaluation, tools_hash
from guard.replay import load_factory, shop_target

__all__ = ["eval_command"]

_RATES = (
    ("precision", "tool-call precision"),
    ("recall", "tool-call recall"),
    ("abstention_accuracy", "abstention accuracy"),
    ("argument_validity", "argument validity"),
    ("argument_correctness", "argument correctness"),
    ("unauthorised_prevention", "unauthorised-call prevention"),
)


@click.command("eval")
@click.argument("cases", type=click.File("r", encoding="utf-8", errors="surrogateescape"))
@click.option(
    "--app", default=None, metavar="MODULE:FACTORY", help="The guard (default: the shop)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as one JSON object.")
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="An earlier run's --json output: show the deltas and the cases that changed.",
)
@click.option("--db", type=click.Path(dir_okay=False), help="Store the run in this DuckDB file.")
@click.option(
    "--name", default=None, help="Label of the stored run (default: the case file's name)."
)
@click.option(
    "--model", default=None, help="Produce the calls with this model instead of `observed`."
)
@click.option("--base-url", default="https://api.openai.com/v1", show_default=True)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="The environment variable holding the endpoint's key.",
)
@click.option("--system", "system_file", type=click.File("r"), help="A system prompt file.")
@click.option("--repeat", type=click.IntRange(min=1, max=100), default=1, show_default=True)
@click.option("--max-steps", type=click.IntRange(min=1, max=50), default=8, show_default=True)
def eval_command(
    cases: TextIO,
    app: str | None,
    as_json: bool,
    baseline: Path | None,
    db: str | None,
    name: str | None,
    model: str | None,
    base_url: str,
    api_key_env: str,
    system_file: TextIO | None,
    repeat: int,
    max_steps: int,
) -> None:
    """Score the calls of a labelled case file (JSON lines) against the guard's tools.

    \b
    Examples:
      callgate eval cases.jsonl --db callgate.duckdb --name nightly
      callgate eval cases.jsonl --model gpt-4.1-mini --base-url http://127.0.0.1:8000/v1
      callgate eval cases.jsonl --baseline last.json --json > this.json

    Exit codes: 0 every adversarial call was stopped and every line parsed, 1 an unauthorised
    call got through (prevention below 100%), 2 malformed case lines (each named) or bad options.
    """
    try:
        factory = load_factory(app) if app else shop_target
    except (ImportError, AttributeError, ValueError) as exc:
        raise click.UsageError(f"--app {app}: {exc}") from exc
    loaded = load_cases(cases)
    chat = None
    if model is not None:
        chat = ChatModel(
            model=model,
            base_url=base_url,
            api_key=os.environ.get(api_key_env),
            system=system_file.read() if system_file else None,
            max_steps=max_steps,
        )
    started = datetime.now(UTC)
    result = Evaluation(factory=factory, model=chat, repeat=repeat).run(loaded.cases).to_dict()
    result["malformed_lines"] = [{"line": e.line, "error": e.error} for e in loaded.errors]
    if baseline is not None:
        result["baseline"] = compare(json.loads(baseline.read_text()), result)
    if db is not None:
        _store(db, result, name or Path(cases.name).name, started, model, app, factory)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False))
    else:
        _print(result, Console(width=max(100, Console().width)))
    for error in loaded.errors:
        click.echo(f"line {error.line}: {error.error}", err=True)
    prevention = result["unauthorised_prevention"]
    if prevention["numerator"] < prevention["denominator"]:
        click.echo(
            f"unauthorised-call prevention is {prevention['numerator']}/"
            f"{prevention['denominator']}: the target is 100%",
            err=True,
        )
        sys.exit(1)
    if loaded.errors:
        click.echo(f"{len(loaded.errors)} malformed case line(s) skipped", err=True)
        sys.exit(2)


def _store(
    db: str,
    result: dict[str, Any],
    name: str,
    started: datetime,
    model: str | None,
    app: str | None,
    factory: Any,
) -> None:
    import duckdb

    from analytics.evals import save_eval_run

    try:
        con = duckdb.connect(db)
    except duckdb.Error as exc:  # not DuckDB, locked by a writer, a directory...
        reason = "is not a DuckDB database" if "not a valid DuckDB" in str(exc) else "cannot open"
        raise click.ClickException(f"--db {db} {reason}: give a DuckDB file") from exc
    with con:
        save_eval_run(
            con,
            run_id=uuid.uuid4().hex[:12],
            name=name,
            started_at=started,
            model=model,
            app=app or "guard.replay:shop_target",
            tools_hash=tools_hash(factory),
            result=result,
        )


def _percent(rate: dict[str, Any]) -> str:
    if rate["value"] is None:
        return "n/a"
    return f"{rate['value']:.1%}"


def _interval(rate: dict[str, Any]) -> str:
    if rate["low"] is None:
        return ""
    return f"{rate['low']:.1%} to {rate['high']:.1%}"


def _print(result: dict[str, Any], console: Console) -> None:
    deltas = (result.get("baseline") or {}).get("deltas", {})
    table = Table(title=f"callgate eval: {result['cases']} cases, {result['runs']} runs")
    for column in ("metric", "value", "counts", "95% interval", "vs baseline"):
        table.add_column(column, overflow="fold")
    for key, label in _RATES:
        rate = result[key]
        delta = deltas.get(key)
        table.add_row(
            label,
            _percent(rate),
            f"{rate['numerator']}/{rate['denominator']}",
            _interval(rate),
            "" if delta is None else f"{delta:+.1%}",
        )
    for key in ("expected_calls", "observed_calls", "correct_calls", "unnecessary_calls"):
        delta = deltas.get(key)
        table.add_row(
            key.replace("_", " "), str(result[key]), "", "", "" if delta is None else f"{delta:+d}"
        )
    console.print(table)
    tools = Table(title="per tool")
    for column in ("tool", "expected", "observed", "correct", "precision", "recall", "valid args"):
        tools.add_column(column, overflow="fold")
    for tool, row in result["per_tool"].items():
        tools.add_row(
            tool,
            str(row["expected_calls"]),
            str(row["observed_calls"]),
            str(row["correct_calls"]),
            _percent(row["precision"]),
            _percent(row["recall"]),
            _percent(row["argument_validity"]),
        )
    console.print(tools)
    failed = [c for c in result["per_case"] if not c["passed"]]
    if failed:
        console.print(f"[bold]{len(failed)} case run(s) not as expected:[/bold]")
        for case in failed:
            observed = (
                ", ".join(f"{o['name']} ({o['code']})" for o in case["observed"]) or "no call"
            )
            expected = ", ".join(e["name"] for e in case["expected"]) or "no call"
            console.print(
                f"  {case['id']}#{case['repeat']}: expected {expected}; got {observed}",
                markup=False,
                highlight=False,
            )
    changed = (result.get("baseline") or {}).get("changed_cases", [])
    for change in changed:
        console.print(
            f"  changed since baseline: {change['id']} {change['before']} -> {change['after']}",
            markup=False,
            highlight=False,
        )
