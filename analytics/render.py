"""How the analytics commands print: rich tables and trees for people, JSON for machines.

No queries here: :mod:`analytics.cli` runs them and hands the results to these functions.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from .alerts import AlertResult
from .load import LoadReport
from .reconstruct import CallSummary, SpanNode, TraceView, enumeration_runs, to_jsonable
from .scenario import ScenarioExport, dumps
from .units import attribute_text, duration_ms

__all__ = [
    "alert_value",
    "asdict_result",
    "calls_table",
    "console",
    "decision_lines",
    "echo_json",
    "enumeration_lines",
    "metric_table",
    "print_alerts",
    "print_load",
    "print_report",
    "print_scenario",
    "print_trace",
]


def console() -> Console:
    """A console on stdout: as wide as the terminal (tables wrap ids there, never cut them), or,
    when stdout is a pipe or a file, as wide as the lines need (ids stay whole for grep)."""
    if sys.stdout.isatty():
        return Console(file=sys.stdout, highlight=False)
    return Console(file=sys.stdout, highlight=False, width=_PIPE_WIDTH, soft_wrap=True)


_PIPE_WIDTH = 1_000
"""Tables are only as wide as their cells; this only keeps a pipe's lines from wrapping."""


def echo_json(data: Any) -> None:
    """``data`` as indented JSON (dataclasses, datetimes and tuples converted)."""
    click.echo(json.dumps(to_jsonable(data), indent=2, sort_keys=False))


def print_load(report: LoadReport, as_json: bool) -> None:
    """What a load did: per file, then the totals; truncated gzip files are named."""
    if as_json:
        echo_json(
            {
                "spans": report.spans,
                "errors": report.errors,
                "bytes": report.bytes,
                "seconds": round(report.seconds, 3),
                "truncated": report.truncated,
                "files": report.files,
            }
        )
        return
    for f in report.files:
        cut = "; truncated gzip: its whole lines were loaded" if f.truncated else ""
        click.echo(
            f"{f.path}: {f.spans} spans, {f.errors} bad lines or spans, {f.bytes} bytes{cut}"
        )
    rate = report.spans / report.seconds if report.seconds else 0.0
    click.echo(
        f"loaded {report.spans} spans from {len(report.files)} file(s) in {report.seconds:.2f}s"
        f" ({rate:,.0f} spans/s); {report.errors} bad line(s) or span(s) in load_errors"
    )
    for path in report.truncated:
        click.echo(
            f"warning: {path} is a truncated gzip file (cut, or still being written): "
            "the lines after the cut were not loaded",
            err=True,
        )


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1%}" if value <= 1.0 else f"{value:.2f}"
    if isinstance(value, datetime):
        # The database stores UTC without a zone; say so, a responder compares it with logs.
        if value.tzinfo is None:
            return value.isoformat(sep=" ", timespec="seconds") + " UTC"
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


_PERCENT_FIELDS = {"rate", "share"}


_DENOMINATORS = {"of_calls": "calls"}
"""Columns that are a rate's denominator: said once in the title when every row has the same."""


def metric_table(title: str, rows: list[Any]) -> Table:
    """One metric's rows; values are text, never markup (tool names come from the model).

    A denominator the same on every row (all calls, for shares of all calls) is said once, in the
    title, instead of in a column that repeats it."""
    names = (
        [f.name for f in fields(rows[0]) if any(getattr(r, f.name) is not None for r in rows)]
        if rows
        else []
    )
    for name, unit in _DENOMINATORS.items():
        values = {getattr(r, name) for r in rows} if name in names else set()
        if len(rows) > 1 and len(values) == 1:
            names.remove(name)
            title = f"{title} (of {_cell(values.pop())} {unit})"
    table = Table(title=title, title_justify="left")
    if not rows:
        table.add_column("(no data)")
        return table
    for name in names:
        table.add_column(
            name.removesuffix("_ms").replace("_", " "),
            justify="right"
            if name not in ("tool", "code", "field", "stage", "session")
            else "left",
        )
    for row in rows:
        cells = []
        for name in names:
            value = getattr(row, name)
            if name.endswith("_ms") and isinstance(value, float):
                cells.append(duration_ms(value))
            elif name in _PERCENT_FIELDS or not isinstance(value, float):
                cells.append(_cell(value))
            else:
                cells.append(f"{value:.3f}")
        table.add_row(*(Text(cell) for cell in cells))
    return table


def print_report(data: dict[str, list[Any]], out: Console, *, open_with: str = "") -> None:
    """Print :func:`collect_report`'s result as one table per metric; after the example traces,
    the command that opens one (``open_with``: the options naming the same database)."""
    for name, rows in data.items():
        out.print(metric_table(name.replace("_", " "), rows))
    examples = data.get("example_traces") or []
    if examples:
        out.print(Text(f"open one: callgate trace {examples[0].trace_id} {open_with}".rstrip()))


def _node_label(node: SpanNode) -> Text:
    label = Text()
    label.append(node.name, style="bold")
    parts = [duration_ms(node.duration_ms), node.stage_outcome, node.code]
    label.append("".join(f"  {p}" for p in parts if p))
    if node.status_code == 2:
        label.append("  error", style="red")
    return label


def _add(tree: Tree, node: SpanNode) -> None:
    branch = tree.add(_node_label(node))
    for event in node.events:
        attrs = ", ".join(f"{k}={attribute_text(k, v)}" for k, v in event.attributes.items())
        branch.add(Text(f"event {event.name} at {_cell(event.time)} {attrs}"))
    if node.name.startswith("execute_tool "):
        for key in ("guard.arguments", "gen_ai.tool.call.arguments"):
            if key in node.attributes:
                branch.add(Text(f"arguments (masked): {node.attributes[key]}"))
                break
        if node.attributes.get("guard.message"):
            branch.add(Text(f"message to the model: {node.attributes['guard.message']}"))
    for child in node.children:
        _add(branch, child)


def _yes(value: bool | None) -> str:
    return "yes" if value else ("no" if value is not None else "-")


def _summary_row(c: CallSummary) -> list[Text]:
    approval = f"{c.approval_id} {c.approval_outcome or ''}".strip() if c.approval_id else "-"
    cells = [
        _cell(c.start_time),
        _cell(c.step),
        _cell(c.tool),
        _cell(c.code),
        "yes" if c.replayed else "-",
        _cell(c.call_id),
        approval,
        _cell(c.attempts),
        _cell(c.arguments),
        c.trace_id,
    ]
    return [Text(cell) for cell in cells]


_CALL_COLUMNS = (
    "start",
    "step",
    "tool",
    "code",
    "replayed",
    "call id",
    "approval",
    "attempts",
    "arguments (masked)",
)


def calls_table(title: str, calls: Sequence[CallSummary]) -> Table:
    """One row per call. Ids are never cut: on a narrow terminal they wrap (``overflow="fold"``)."""
    table = Table(title=Text(title), title_justify="left")
    for name in _CALL_COLUMNS:
        table.add_column(name, overflow="fold")
    table.add_column("trace", overflow="fold")
    for c in calls:
        table.add_row(*_summary_row(c))
    return table


def _call_lines(c: CallSummary) -> list[str]:
    lines = [
        f"call {_cell(c.call_id)}: tool {_cell(c.tool)}, session {_cell(c.session)}, "
        f"principal {_cell(c.principal)}, step {_cell(c.step)}",
        f"  code {_cell(c.code)} (ok {_yes(c.ok)}, fixable by the model {_yes(c.fixable)}), "
        f"outcome {_cell(c.outcome)}, attempts {_cell(c.attempts)}, replayed {_yes(c.replayed)}, "
        f"confirmed {_yes(c.confirmed)}, resumed {_yes(c.resumed)}",
    ]
    if c.message:
        lines.append(f"  message to the model: {c.message}")
    if c.untrusted:
        lines.append("  " + _taint_flags(c))
    if c.injection_excerpt:
        lines.append(f"  the text that matched (masked): {c.injection_excerpt}")
    return lines


def _taint_flags(c: CallSummary) -> str:
    found = (
        f"injection detected (rule {_cell(c.injection_rule)})"
        if c.injection_detected
        else "no injection detected"
    )
    return f"returned untrusted outside text: the session is tainted from here; {found}"


def print_trace(view: TraceView, *, open_with: str = "") -> None:
    """The span tree, each call with its message and flags, what tainted it, its approvals.

    ``open_with`` (e.g. ``--db demo.duckdb``) is repeated in the hints that open another trace,
    so they read the database this one came from."""
    out = console()
    tree = Tree(Text(f"trace {view.trace_id}"))
    for root in view.roots:
        _add(tree, root)
    out.print(tree)
    for c in view.calls:
        for line in _call_lines(c):
            out.print(Text(line))
    for t in view.tainted_by:
        out.print(
            Text(
                f"tainted by: call {_cell(t.call_id)} ({_cell(t.tool)}, step {_cell(t.step)}, "
                f"{_cell(t.start_time)}): {_taint_flags(t)}\n"
                f"  open it: callgate trace {t.trace_id} {open_with}".rstrip()
                + (
                    f"\n  the text that matched (masked): {t.injection_excerpt}"
                    if t.injection_excerpt
                    else ""
                )
            )
        )
    for v in view.value_from:
        held = next((c for c in (*view.calls, *view.approvals) if c.provenance_field), None)
        argument = (
            f"argument {_cell(held.provenance_field)} ({_cell(held.provenance_value)}) "
            if held
            else ""
        )
        out.print(
            Text(
                f"value from: {argument}came from call {_cell(v.call_id)} ({_cell(v.tool)}, step "
                f"{_cell(v.step)}, {_cell(v.start_time)}), untrusted output no trusted source "
                f"vouches for\n  open it: callgate trace {v.trace_id}"
            )
        )
    if view.approvals:
        out.print(calls_table("approval history", view.approvals))
        for line in decision_lines(view.approvals):
            out.print(Text(line))


def print_scenario(found: ScenarioExport, path: Path, as_json: bool) -> None:
    """Write the scenario lines to ``path``; say how many calls went in and why any were skipped."""
    path.write_text("".join(dumps(line) + "\n" for line in found.lines), encoding="utf-8")
    if as_json:
        echo_json({"scenario": str(path), "calls": found.calls, "skipped": found.skipped})
        return
    click.echo(f"wrote {found.calls} calls to {path}; skipped {len(found.skipped)}")
    for reason, count in Counter(s.reason for s in found.skipped).most_common():
        click.echo(f"  {count:>6}  {reason}")
    for skipped in found.skipped[:20]:
        click.echo(
            f"  skipped {skipped.trace_id} {skipped.tool} ({skipped.call_id}): {skipped.reason}"
        )
    if len(found.skipped) > 20:
        click.echo(f"  ... and {len(found.skipped) - 20} more (--json lists them all)")


def asdict_result(result: AlertResult) -> dict[str, Any]:
    """An evaluated rule as plain data (for ``--json`` and the dashboard)."""
    return {
        "name": result.rule.name,
        "condition": result.rule.describe(),
        "value": result.value,
        "previous": result.previous,
        "change": result.change,
        "calls": result.calls,
        "firing": result.firing,
        "now": result.now,
    }


def alert_value(value: float | None, metric: str) -> str:
    """An alert metric's value as people read it: rates in %, durations in ms, counts."""
    if value is None:
        return "-"
    if metric.endswith("_rate"):
        return f"{value:.1%}"
    return duration_ms(value) if metric.endswith("_ms") else f"{value:,.6g}"


def print_alerts(results: Sequence[AlertResult], out: Console, *, checked: int) -> None:
    """Firing (or all) rules: name, condition, value now, over the previous window, calls."""
    firing = sum(r.firing for r in results)
    when = _cell(results[0].now) if results else "-"
    if not results:
        out.print(Text(f"no rule fires ({checked} checked)"))
        return
    table = Table(
        title=Text(f"alerts as of {when}: {firing} of {checked} firing"), title_justify="left"
    )
    for name in ("state", "rule", "condition", "value", "previous window", "calls"):
        table.add_column(name, overflow="fold")
    for r in results:
        table.add_row(
            *(
                Text(cell)
                for cell in (
                    "FIRING" if r.firing else "ok",
                    r.rule.name,
                    r.rule.describe(),
                    alert_value(r.value, r.rule.metric),
                    alert_value(r.previous, r.rule.metric),
                    f"{r.calls:,}",
                )
            )
        )
    out.print(table)


def enumeration_lines(calls: Sequence[CallSummary]) -> list[str]:
    """One warning per run of refused calls on neighbouring ids in ``calls`` (a session)."""
    return [
        f"possible id enumeration: {len(run.calls)} {run.code} calls of {run.tool} in a row "
        f"(steps {_cell(run.calls[0].step)}-{_cell(run.calls[-1].step)}) on neighbouring ids, "
        f"from {run.first} to {run.last}"
        for run in enumeration_runs(calls)
    ]


def decision_lines(calls: Sequence[CallSummary]) -> list[str]:
    """Who decided each resumed call, when, and how long after the request.

    The span holds the decider as a keyed hash (``guard.approval.by``), labelled as such so it is
    never mistaken for a name; the name shows when the approvals store was read
    (:mod:`analytics.deciders`), labelled with where it came from.
    """
    lines = []
    for c in calls:
        if not c.resumed or c.approval_outcome is None:
            continue
        lines.append(f"{c.approval_id}: {c.approval_outcome}{_decider(c)}{_decided_when(c)}")
    return lines


def _decider(c: CallSummary) -> str:
    if c.decided_by_name is not None:
        if c.decider_matches_span is False:
            return (
                f" by {c.decided_by_name} according to the approvals store, but the span's keyed "
                f"hash {c.approved_by} is someone else's: the store was changed or is another "
                "deployment's"
            )
        checked = "; matches the span's keyed hash" if c.decider_matches_span else ""
        return f" by {c.decided_by_name} (approvals store{checked})"
    if c.approved_by:
        return f" by {c.approved_by} (keyed hash of the approver; --store names them)"
    if c.approval_outcome == "expired":
        return " (nobody decided: the approval lapsed)"
    return ""


def _decided_when(c: CallSummary) -> str:
    when = ""
    if c.approval_decided_at is not None and c.approval_decided_at > 946_684_800:
        at = datetime.fromtimestamp(c.approval_decided_at, UTC).replace(tzinfo=None)
        when = f" at {_cell(at)}"
    wait = (
        f", {duration_ms(c.approval_wait_ms)} after it was asked"
        if c.approval_wait_ms is not None
        else ""
    )
    return when + wait
