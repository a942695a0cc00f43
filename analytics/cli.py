"""The analytics commands: ``load``, ``report``, ``trace``, ``export``.

Each is a :class:`click.Command` that the top-level ``callgate`` group registers; ``analytics_cli``
groups them for tests and for running this module alone. Commands parse options, open the source
(:func:`analytics.database.open_database`, or ClickHouse), run the queries and hand the results to
:mod:`analytics.render`. A database problem (missing, not DuckDB, not callgate's, busy) is an error
message and exit code 1, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from . import advisories, gates, metrics, shadow
from .database import DEFAULT_DB, DatabaseError, open_database
from .load import ForeignFileError, follow, load
from .parquet import export_parquet
from .reconstruct import AmbiguousIdError, calls_by_call_id, resolve_id, session_calls
from .reconstruct import trace as rebuild_trace
from .render import (
    calls_table,
    console,
    echo_json,
    print_load,
    print_report,
    print_scenario,
    print_trace,
)
from .scenario import export_scenario

__all__ = [
    "analytics_cli",
    "collect_report",
    "export_command",
    "load_command",
    "print_report",
    "report_command",
    "trace_command",
]

_db_option = click.option(
    "--db",
    "database",
    default=lambda: os.environ.get("CALLGATE_DB", DEFAULT_DB),
    show_default="$CALLGATE_DB or callgate.duckdb",
    type=click.Path(dir_okay=False),
    help="The DuckDB database file.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
_clickhouse_option = click.option(
    "--clickhouse", "clickhouse_url", help="Read ClickHouse (otel_traces) at URL instead."
)


@contextlib.contextmanager
def _source(database: str, clickhouse_url: str | None) -> Iterator[metrics.Source]:
    """The source a read command queries: ClickHouse at the URL, or the DuckDB file read-only.

    Every problem opening or reading it becomes a :class:`click.ClickException`.
    """
    try:
        if clickhouse_url:
            from .clickhouse import connect_url

            yield connect_url(clickhouse_url)
            return
        with open_database(database) as con:
            yield con
    except (DatabaseError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc


# ---------------------------------------------------------------------------------------------
# load


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
                follow(database, paths, interval=interval, on_load=lambda r: print_load(r, as_json))
            return
        with open_database(database, read_only=False) as con:
            print_load(load(con, paths), as_json)
    except (ForeignFileError, FileNotFoundError, DatabaseError) as exc:
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


_PSEUDONYM = re.compile(r"p_[0-9a-f]{12}")


def _pseudonyms(principals: tuple[str, ...]) -> tuple[str, ...]:
    """Principals as the spans store them: keyed hashes (``p_...``) made with the deployment's
    masking key. A value that already is a pseudonym is kept; without a key nothing else can
    match, and the command says so."""
    typed = [p for p in principals if not _PSEUDONYM.fullmatch(p)]
    if not typed:
        return principals
    key = os.environ.get("CALLGATE_MASKING_KEY")
    if not key:
        click.echo(
            f"warning: no masking key configured (CALLGATE_MASKING_KEY), so {', '.join(typed)} "
            "cannot be hashed as the spans store principals and will match nothing; set the "
            "key the services use, or give the pseudonym (p_...) shown in the tables",
            err=True,
        )
        return principals
    from telemetry.masking import Masker  # the one definition of the pseudonym

    masker = Masker(key=key.encode())
    return tuple(p if _PSEUDONYM.fullmatch(p) else masker.principal(p) for p in principals)


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
        # Calls that did not run, by who can act on them (analytics.gates; docs/metrics.md).
        "gates_apart_from_errors": gates.gate_shares(source, filters, bucket=bucket),
        "gates_apart_from_errors_by_tool": gates.gate_shares(
            source, filters, by="tool", bucket=bucket
        ),
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
        # Issue 11: warnings that let calls through, and what shadow mode would have refused.
        "warnings": advisories.warning_counts(source, filters, bucket=bucket),
        "would_have_rejected_in_shadow": shadow.would_have_rejected(source, filters, bucket=bucket),
        "would_have_waited_in_shadow": shadow.would_have_waited(source, filters, bucket=bucket),
    }


@click.command("report")
@_db_option
@click.option("--since", help="Start of the time range (ISO 8601, UTC unless an offset is given).")
@click.option("--until", help="End of the time range (exclusive).")
@click.option("--service", "services", multiple=True, help="Only these services (repeatable).")
@click.option("--tool", "tools", multiple=True, help="Only these tools (repeatable).")
@click.option(
    "--principal",
    "principals",
    multiple=True,
    help="Only these principals, as people type them (CUS-1: hashed with $CALLGATE_MASKING_KEY, "
    "as the spans store them) or as stored pseudonyms (p_...).",
)
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
@_clickhouse_option
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
        principals=_pseudonyms(principals),
    )
    step = _duration(bucket)
    with _source(database, clickhouse_url) as source:
        data = collect_report(source, filters, k=k, min_calls=min_calls, bucket=step)
    if as_json:
        echo_json({"filters": filters, "k": k, "min_calls": min_calls, **data})
        return
    print_report(data, console())


# ---------------------------------------------------------------------------------------------
# trace


@click.command("trace")
@click.argument("trace_id", required=False)
@_db_option
@click.option("--session", help="Show this session's calls in order.")
@click.option("--call-id", help="Find calls by the model's call id.")
@_clickhouse_option
@_json_option
def trace_command(
    trace_id: str | None,
    database: str,
    session: str | None,
    call_id: str | None,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Rebuild a call from its trace id: stages, codes, timings, masked arguments, approvals.

    Any id may be given by an unambiguous prefix (``callgate trace 0a1b2c``).
    """
    if sum(x is not None for x in (trace_id, session, call_id)) != 1:
        raise click.UsageError("give exactly one of TRACE_ID, --session or --call-id")
    with _source(database, clickhouse_url) as source:
        _print_lookup(source, trace_id, session, call_id, as_json)


def _print_lookup(
    source: metrics.Source,
    trace_id: str | None,
    session: str | None,
    call_id: str | None,
    as_json: bool,
) -> None:
    if trace_id is not None:
        full = _resolve(source, "trace_id", trace_id)
        view = rebuild_trace(source, full or trace_id)
        if view is None:
            raise click.ClickException(f"no spans for trace {trace_id}")
        echo_json(view) if as_json else print_trace(view)
        return
    if session is not None:
        session = _resolve(source, "session", session) or session
        calls = session_calls(source, session)
        title = f"session {session}"
    else:
        call_id = _resolve(source, "call_id", call_id or "") or call_id or ""
        calls = calls_by_call_id(source, call_id)
        title = f"call id {call_id}"
    if not calls:
        raise click.ClickException(f"no calls for {title}")
    echo_json(calls) if as_json else console().print(calls_table(title, calls))


def _resolve(source: metrics.Source, column: str, prefix: str) -> str | None:
    """The full id for an unambiguous prefix (see :func:`analytics.reconstruct.resolve_id`)."""
    try:
        return resolve_id(source, column, prefix)
    except AmbiguousIdError as exc:
        raise click.ClickException(f"{exc}; give more characters") from exc


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
@click.option("--tool", "tools", multiple=True, help="Scenario: only calls to this tool.")
@click.option("--code", "codes", multiple=True, help="Scenario: only calls that ended so.")
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
    key = os.environ.get(masking_key_env)
    if scenario is not None and principals and not key:
        raise click.UsageError(
            f"--principal needs the masking key in ${masking_key_env} to match pseudonyms"
        )
    try:
        with open_database(database) as con:
            if scenario is not None:
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
            else:
                assert directory is not None
                result = export_parquet(con, directory)
    except DatabaseError as exc:
        raise click.ClickException(str(exc)) from exc
    if scenario is not None:
        print_scenario(found, scenario, as_json)
    elif as_json:
        echo_json(result)
    else:
        click.echo(f"wrote {result.spans} spans to {result.directory} ({len(result.days)} days)")


@click.group("analytics")
def analytics_cli() -> None:
    """callgate analytics: load span files, report metrics, rebuild traces, export."""


for _command in (load_command, report_command, trace_command, export_command):
    analytics_cli.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    analytics_cli(sys.argv[1:])
