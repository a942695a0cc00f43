"""The analytics commands: ``load``, ``report``, ``trace``, ``export``.

Each is a :class:`click.Command` that the top-level ``callgate`` group registers; ``analytics_cli``
groups them for tests and for running this module alone. Output is rich tables and trees for people,
``--json`` for machines.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from . import metrics
from .load import ForeignFileError, LoadReport, connect, follow, load
from .parquet import export_parquet
from .reconstruct import (
    CallSummary,
    SpanNode,
    TraceView,
    calls_by_call_id,
    session_calls,
    to_jsonable,
)
from .reconstruct import trace as rebuild_trace
from .scenario import ScenarioExport, dumps, export_scenario

__all__ = [
    "analytics_cli",
    "collect_report",
    "export_command",
    "load_command",
    "print_report",
    "report_command",
    "trace_command",
]

DEFAULT_DB = "callgate.duckdb"

_db_option = click.option(
    "--db",
    "database",
    default=lambda: os.environ.get("CALLGATE_DB", DEFAULT_DB),
    show_default="$CALLGATE_DB or callgate.duckdb",
    type=click.Path(dir_okay=False),
    help="The DuckDB database file.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")


def _console() -> Console:
    return Console(file=sys.stdout, width=140, highlight=False)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(to_jsonable(data), indent=2, sort_keys=False))


# ---------------------------------------------------------------------------------------------
# load


def _print_load(report: LoadReport, as_json: bool) -> None:
    if as_json:
        _echo_json(
            {
                "spans": report.spans,
                "errors": report.errors,
                "bytes": report.bytes,
                "seconds": round(report.seconds, 3),
                "files": report.files,
            }
        )
        return
    for f in report.files:
        click.echo(f"{f.path}: {f.spans} spans, {f.errors} bad lines, {f.bytes} bytes")
    rate = report.spans / report.seconds if report.seconds else 0.0
    click.echo(
        f"loaded {report.spans} spans from {len(report.files)} file(s) in {report.seconds:.2f}s"
        f" ({rate:,.0f} spans/s); {report.errors} bad line(s) in load_errors"
    )


@click.command("load")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@_db_option
@click.option("--follow", "keep_following", is_flag=True, help="Keep loading as files grow.")
@click.option("--interval", default=1.0, show_default=True, help="Seconds between rounds.")
@_json_option
def load_command(
    paths: Sequence[str], database: str, keep_following: bool, interval: float, as_json: bool
) -> None:
    """Load span files (OTLP JSON lines, plain or gzip; files, directories) into the database."""
    try:
        if keep_following:
            with contextlib.suppress(KeyboardInterrupt):
                follow(
                    database, paths, interval=interval, on_load=lambda r: _print_load(r, as_json)
                )
            return
        con = connect(database)
        try:
            _print_load(load(con, paths), as_json)
        finally:
            con.close()
    except (ForeignFileError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc


# ---------------------------------------------------------------------------------------------
# report

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _duration(value: str | None) -> timedelta | None:
    if not value:
        return None
    match = _DURATION.match(value.strip())
    if not match:
        raise click.BadParameter(f"{value!r}: use a number and s, m, h or d, e.g. 1h")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time") from exc
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


def collect_report(
    source: metrics.Source,
    filters: metrics.Filters,
    *,
    k: int,
    min_calls: int,
    bucket: timedelta | None,
) -> dict[str, list[Any]]:
    """Every metric, in report order."""
    return {
        "overview": metrics.overview(source, filters, bucket=bucket),
        "rejection_rate_by_tool": metrics.rejection_rate(
            source, filters, by="tool", min_calls=min_calls, bucket=bucket
        ),
        "rejection_rate_by_code": metrics.rejection_rate(
            source, filters, by="code", min_calls=min_calls, bucket=bucket
        ),
        "invalid_fields": metrics.invalid_fields(source, filters, bucket=bucket),
        "recovery_rate": metrics.recovery_rate(
            source, filters, k=k, min_calls=min_calls, bucket=bucket
        ),
        "replays": metrics.replays(source, filters, bucket=bucket),
        "loop_guards": metrics.loop_guards(source, filters, bucket=bucket),
        "stuck_sessions": metrics.stuck_sessions(source, filters, limit=10),
        "confirmation_funnel": metrics.confirmation_funnel(source, filters, bucket=bucket),
        "stage_latency": metrics.stage_latency(source, filters, bucket=bucket),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1%}" if value <= 1.0 else f"{value:.2f}"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


_PERCENT_FIELDS = {"rate", "share"}


def _table(title: str, rows: list[Any]) -> Table:
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


@click.command("report")
@_db_option
@click.option("--since", help="Start of the time range (ISO 8601, UTC unless an offset is given).")
@click.option("--until", help="End of the time range (exclusive).")
@click.option("--service", "services", multiple=True, help="Only these services (repeatable).")
@click.option("--tool", "tools", multiple=True, help="Only these tools (repeatable).")
@click.option("--principal", "principals", multiple=True, help="Only these principals.")
@click.option(
    "-k",
    "k",
    default=metrics.FIXABLE_DEFAULT_K,
    show_default=True,
    help="Recovery: how many calls ahead a fix may come.",
)
@click.option(
    "--min-calls", default=20, show_default=True, help="Rates below this many calls are not shown."
)
@click.option("--bucket", help="Time series bucket, e.g. 15m, 1h, 1d.")
@click.option("--clickhouse", "clickhouse_url", help="Run on ClickHouse (otel_traces) at URL.")
@_json_option
def report_command(
    database: str,
    since: str | None,
    until: str | None,
    services: tuple[str, ...],
    tools: tuple[str, ...],
    principals: tuple[str, ...],
    k: int,
    min_calls: int,
    bucket: str | None,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Print the metrics: rejections, recovery, replays, loop guards, confirmations, latency."""
    filters = metrics.Filters(
        start=_time(since),
        end=_time(until),
        services=services,
        tools=tools,
        principals=principals,
    )
    step = _duration(bucket)
    if clickhouse_url:
        from .clickhouse import connect_url

        try:
            backend = connect_url(clickhouse_url)
        except RuntimeError as exc:
            raise click.ClickException(str(exc)) from exc
        data = collect_report(backend, filters, k=k, min_calls=min_calls, bucket=step)
    else:
        if not os.path.exists(database):
            raise click.ClickException(f"no database at {database}: run `callgate load` first")
        con = connect(database, read_only=True)
        try:
            data = collect_report(con, filters, k=k, min_calls=min_calls, bucket=step)
        finally:
            con.close()
    if as_json:
        _echo_json({"filters": filters, "k": k, "min_calls": min_calls, **data})
        return
    print_report(data, _console())


def print_report(data: dict[str, list[Any]], console: Console) -> None:
    """Print :func:`collect_report`'s result as one table per metric."""
    for name, rows in data.items():
        console.print(_table(name.replace("_", " "), rows))


# ---------------------------------------------------------------------------------------------
# trace


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
        branch.add(f"event {event.name} at {event.time.isoformat()} {attrs}")
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


def _calls_table(title: str, calls: Sequence[CallSummary]) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("start", "step", "tool", "code", "call id", "approval", "attempts", "trace"):
        table.add_column(name)
    for c in calls:
        table.add_row(*_summary_row(c))
    return table


def _print_trace(view: TraceView) -> None:
    console = _console()
    tree = Tree(f"trace {view.trace_id}")
    for root in view.roots:
        _add(tree, root)
    console.print(tree)
    for c in view.calls:
        console.print(
            f"call {c.call_id} tool={c.tool} session={c.session} principal={c.principal} "
            f"step={c.step} code={c.code} ok={c.ok} outcome={c.outcome} attempts={c.attempts} "
            f"replayed={c.replayed} confirmed={c.confirmed}"
        )
    if view.approvals:
        console.print(_calls_table("approval history", view.approvals))


@click.command("trace")
@click.argument("trace_id", required=False)
@_db_option
@click.option("--session", help="Show this session's calls in order.")
@click.option("--call-id", help="Find calls by the model's call id.")
@click.option("--clickhouse", "clickhouse_url", help="Read ClickHouse (otel_traces) at URL instead.")
@_json_option
def trace_command(
    trace_id: str | None,
    database: str,
    session: str | None,
    call_id: str | None,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Rebuild a call from its trace id: stages, codes, timings, masked arguments, approvals."""
    if sum(x is not None for x in (trace_id, session, call_id)) != 1:
        raise click.UsageError("give exactly one of TRACE_ID, --session or --call-id")
    if clickhouse_url:
        from .clickhouse import connect_url

        _print_lookup(connect_url(clickhouse_url), trace_id, session, call_id, as_json)
        return
    if not os.path.exists(database):
        raise click.ClickException(f"no database at {database}: run `callgate load` first")
    con = connect(database, read_only=True)
    try:
        _print_lookup(con, trace_id, session, call_id, as_json)
    finally:
        con.close()


def _print_lookup(
    source: metrics.Source,
    trace_id: str | None,
    session: str | None,
    call_id: str | None,
    as_json: bool,
) -> None:
    if trace_id is not None:
        view = rebuild_trace(source, trace_id)
        if view is None:
            raise click.ClickException(f"no spans for trace {trace_id}")
        _echo_json(view) if as_json else _print_trace(view)
        return
    if session is not None:
        calls = session_calls(source, session)
        title = f"session {session}"
    else:
        calls = calls_by_call_id(source, call_id or "")
        title = f"call id {call_id}"
    if not calls:
        raise click.ClickException(f"no calls for {title}")
    _echo_json(calls) if as_json else _console().print(_calls_table(title, calls))


# ---------------------------------------------------------------------------------------------
# export


@click.command("export")
@_db_option
@click.option(
    "--parquet",
    "directory",
    type=click.Path(file_okay=False),
    help="Write spans here as Parquet, partitioned by day.",
)
@click.option(
    "--scenario",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the selected calls as a `callgate replay` scenario, each expecting its recorded code.",
)
@click.option(
    "--tool", "tools", multiple=True, help="Scenario: only calls to this tool (repeatable)."
)
@click.option(
    "--code", "codes", multiple=True, help="Scenario: only calls that ended with this code."
)
@click.option("--session", "sessions", multiple=True, help="Scenario: only this session.")
@click.option("--since", default=None, help="Scenario: calls from this ISO 8601 time.")
@click.option("--until", default=None, help="Scenario: calls before this ISO 8601 time.")
@click.option(
    "--principal",
    "principals",
    multiple=True,
    metavar="ID",
    help="Scenario: a principal id to write back in place of its pseudonym (repeatable).",
)
@click.option(
    "--masking-key-env",
    default="CALLGATE_MASKING_KEY",
    show_default=True,
    help="Scenario: the variable holding the masking key the pseudonyms were made with.",
)
@_json_option
def export_command(
    database: str,
    directory: str | None,
    scenario: Path | None,
    tools: tuple[str, ...],
    codes: tuple[str, ...],
    sessions: tuple[str, ...],
    since: str | None,
    until: str | None,
    principals: tuple[str, ...],
    masking_key_env: str,
    as_json: bool,
) -> None:
    """Export the spans to Parquet (one directory per day), or calls as a replay scenario."""
    if (directory is None) == (scenario is None):
        raise click.UsageError("give one of --parquet DIR or --scenario FILE")
    if not os.path.exists(database):
        raise click.ClickException(f"no database at {database}: run `callgate load` first")
    con = connect(database, read_only=True)
    try:
        if scenario is not None:
            key = os.environ.get(masking_key_env)
            if principals and not key:
                raise click.UsageError(
                    f"--principal needs the masking key in ${masking_key_env} to match pseudonyms"
                )
            found = export_scenario(
                con,
                tools=tools,
                codes=codes,
                sessions=sessions,
                since=_time(since),
                until=_time(until),
                principals=principals,
                key=key,
            )
            _print_scenario(found, scenario, as_json)
            return
        assert directory is not None
        result = export_parquet(con, directory)
    finally:
        con.close()
    if as_json:
        _echo_json(result)
    else:
        click.echo(f"wrote {result.spans} spans to {result.directory} ({len(result.days)} days)")


def _print_scenario(found: ScenarioExport, path: Path, as_json: bool) -> None:
    path.write_text("".join(dumps(line) + "\n" for line in found.lines), encoding="utf-8")
    if as_json:
        _echo_json({"scenario": str(path), "calls": found.calls, "skipped": found.skipped})
        return
    click.echo(f"wrote {found.calls} calls to {path}; skipped {len(found.skipped)}")
    reasons = Counter(s.reason for s in found.skipped)
    for reason, count in reasons.most_common():
        click.echo(f"  {count:>6}  {reason}")
    for skipped in found.skipped[:20]:
        click.echo(
            f"  skipped {skipped.trace_id} {skipped.tool} ({skipped.call_id}): {skipped.reason}"
        )
    if len(found.skipped) > 20:
        click.echo(f"  ... and {len(found.skipped) - 20} more (--json lists them all)")


@click.group("analytics")
def analytics_cli() -> None:
    """callgate analytics: load span files, report metrics, rebuild traces, export."""


for _command in (load_command, report_command, trace_command, export_command):
    analytics_cli.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    analytics_cli(sys.argv[1:])
