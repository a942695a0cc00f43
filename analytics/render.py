"""How the analytics commands print: rich tables and trees for people, JSON for machines.

No queries here: :mod:`analytics.cli` runs them and hands the results to these functions.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from .load import LoadReport
from .reconstruct import CallSummary, SpanNode, TraceView, to_jsonable

__all__ = [
    "calls_table",
    "console",
    "echo_json",
    "metric_table",
    "print_load",
    "print_report",
    "print_trace",
]


def console() -> Console:
    """A console on stdout, as wide as the terminal (tables wrap rather than cut)."""
    return Console(file=sys.stdout, highlight=False)


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
        click.echo(f"{f.path}: {f.spans} spans, {f.errors} bad lines or spans, {f.bytes} bytes{cut}")
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
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


_PERCENT_FIELDS = {"rate", "share"}


def metric_table(title: str, rows: list[Any]) -> Table:
    table = Table(title=title, title_justify="left")
    if not rows:
        table.add_column("(no data)")
        return table
    names = [f.name for f in fields(rows[0]) if any(getattr(r, f.name) is not None for r in rows)]
    for name in names:
        table.add_column(
            name,
            justify="right"
            if name not in ("tool", "code", "field", "stage", "session")
            else "left",
        )
    for row in rows:
        cells = []
        for name in names:
            value = getattr(row, name)
            if name.endswith("_ms") and isinstance(value, float):
                cells.append(f"{value:.3f}")
            elif name in _PERCENT_FIELDS or not isinstance(value, float):
                cells.append(_cell(value))
            else:
                cells.append(f"{value:.3f}")
        table.add_row(*cells)
    return table


def print_report(data: dict[str, list[Any]], out: Console) -> None:
    """Print :func:`collect_report`'s result as one table per metric."""
    for name, rows in data.items():
        out.print(metric_table(name.replace("_", " "), rows))


def _node_label(node: SpanNode) -> str:
    parts = [f"[bold]{node.name}[/bold]", f"{node.duration_ms:.3f} ms"]
    if node.stage_outcome:
        parts.append(node.stage_outcome)
    if node.code:
        parts.append(node.code)
    if node.status_code == 2:
        parts.append("[red]error[/red]")
    return "  ".join(parts)


def _add(tree: Tree, node: SpanNode) -> None:
    branch = tree.add(_node_label(node))
    for event in node.events:
        attrs = ", ".join(f"{k}={v}" for k, v in event.attributes.items())
        branch.add(f"event {event.name} at {_cell(event.time)} {attrs}")
    if node.name.startswith("execute_tool "):
        for key in ("guard.arguments", "gen_ai.tool.call.arguments"):
            if key in node.attributes:
                branch.add(f"arguments (masked): {node.attributes[key]}")
                break
    for child in node.children:
        _add(branch, child)


def _summary_row(c: CallSummary) -> list[str]:
    approval = f"{c.approval_id} {c.approval_outcome}" if c.approval_id else ""
    return [
        _cell(c.start_time),
        _cell(c.step),
        _cell(c.tool),
        _cell(c.code),
        _cell(c.call_id),
        approval,
        _cell(c.attempts),
        c.trace_id,
    ]


def calls_table(title: str, calls: Sequence[CallSummary]) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("start", "step", "tool", "code", "call id", "approval", "attempts", "trace"):
        table.add_column(name)
    for c in calls:
        table.add_row(*_summary_row(c))
    return table


def print_trace(view: TraceView) -> None:
    out = console()
    tree = Tree(f"trace {view.trace_id}")
    for root in view.roots:
        _add(tree, root)
    out.print(tree)
    for c in view.calls:
        out.print(
            f"call {c.call_id} tool={c.tool} session={c.session} principal={c.principal} "
            f"step={c.step} code={c.code} ok={c.ok} outcome={c.outcome} attempts={c.attempts} "
            f"replayed={c.replayed} confirmed={c.confirmed}"
        )
    if view.approvals:
        out.print(calls_table("approval history", view.approvals))
