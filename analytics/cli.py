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

from . import advisories, alerts, call_latency, gates, metrics, shadow
from .database import DEFAULT_DB, DatabaseError, open_database
from .follow import follow
from .load import ForeignFileError, load
from .options import confirmation_ttl_option
from .parquet import export_parquet
from .reconstruct import AmbiguousIdError, TraceView, lookup
from .render import (
    asdict_result,
    calls_table,
    console,
    echo_json,
    enumeration_lines,
    print_alerts,
    print_load,
    print_report,
    print_scenario,
    print_trace,
)
from .scenario import export_scenario

__all__ = [
    "alerts_command",
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
@click.option(
    "--verify",
    "check_chain",
    is_flag=True,
    help="Load nothing unless the files pass `callgate verify` (key from CALLGATE_MASKING_KEY).",
)
@click.option(
    "--allow-unkeyed", is_flag=True, help="With --verify and a key, accept unkeyed chains."
)
@_json_option
def load_command(
    paths: Sequence[str],
    database: str,
    keep_following: bool,
    interval: float,
    check_chain: bool,
    allow_unkeyed: bool,
    as_json: bool,
) -> None:
    """Load span files (OTLP JSON lines, plain or gzip; files, directories) into the database.

    \b
    Examples:
      callgate load callgate-trail/ --db callgate.duckdb
      callgate load callgate-trail/ --db callgate.duckdb --follow --interval 1
      CALLGATE_MASKING_KEY=... callgate load callgate-trail/ --verify

    Exit codes: 0 loaded (a bad line is counted in load_errors, never fatal), 1 a file or the
    database could not be read or --verify found a problem, 2 bad options.
    """
    if check_chain and keep_following:
        raise click.UsageError("--verify checks files once, before loading: not with --follow")
    if allow_unkeyed and not check_chain:
        raise click.UsageError("--allow-unkeyed only goes with --verify")
    try:
        if check_chain:
            _refuse_unverified(paths, allow_unkeyed)
        if keep_following:
            with contextlib.suppress(KeyboardInterrupt):
                follow(database, paths, interval=interval, on_load=lambda r: print_load(r, as_json))
            return
        with open_database(database, read_only=False) as con:
            print_load(load(con, paths), as_json)
    except (ForeignFileError, FileNotFoundError, DatabaseError) as exc:
        raise click.ClickException(str(exc)) from exc


def _refuse_unverified(paths: Sequence[str], allow_unkeyed: bool) -> None:
    """Raise a one-line error naming the first problem when the files behind ``paths`` (the
    same files ``load`` reads) do not verify; nothing is written to the database then."""
    from telemetry.chain import env_chain_key, verify

    report = verify(paths, key=env_chain_key(), allow_unkeyed=allow_unkeyed)
    if not report.ok:
        first = report.problems[0]
        others = len(report.problems) - 1
        more = f" and {others} more (run callgate verify)" if others else ""
        raise click.ClickException(f"not loaded: {first}{more}")


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
    confirmation_ttl: timedelta = metrics.DEFAULT_CONFIRMATION_TTL,
    examples: int = 0,
) -> dict[str, list[Any]]:
    """Every metric, in report order; with ``examples``, that many trace ids per code last.

    ``confirmation_ttl`` splits pending from expired approvals, as the dashboard does with the
    same option (:func:`analytics.options.confirmation_ttl_option`).
    """
    report: dict[str, list[Any]] = {
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
        "confirmation_funnel": metrics.confirmation_funnel(
            source, filters, bucket=bucket, ttl=confirmation_ttl
        ),
        "call_latency": call_latency.call_latency(source, filters, bucket=bucket),
        "stage_latency": metrics.stage_latency(source, filters, bucket=bucket),
        # Issue 11: warnings that let calls through, and what shadow mode would have refused.
        "warnings": advisories.warning_counts(source, filters, bucket=bucket),
        "would_have_rejected_in_shadow": shadow.would_have_rejected(source, filters, bucket=bucket),
        "would_have_waited_in_shadow": shadow.would_have_waited(source, filters, bucket=bucket),
    }
    if examples:
        report["example_traces"] = metrics.rejection_examples(source, filters, n=examples)
    return report


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
@click.option(
    "--examples",
    default=0,
    show_default=True,
    type=click.IntRange(0, 100),
    metavar="N",
    help="Also list the N latest trace ids per rejection code (open one with `callgate trace`).",
)
@confirmation_ttl_option
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
    examples: int,
    confirmation_ttl: float,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Print the metrics: rejections, recovery, replays, loop guards, confirmations, latency.

    \b
    Examples:
      callgate report --db callgate.duckdb
      callgate report --since 2026-12-01T00:00 --tool refund_order --examples 3
      callgate report --bucket 1h --json > report.json

    Exit codes: 0 printed, 1 the database could not be read, 2 bad options.
    """
    filters = metrics.Filters(
        start=_time(since),
        end=_time(until),
        services=services,
        tools=tools,
        principals=_pseudonyms(principals),
    )
    step = _duration(bucket)
    with _source(database, clickhouse_url) as source:
        data = collect_report(
            source,
            filters,
            k=k,
            min_calls=min_calls,
            bucket=step,
            confirmation_ttl=timedelta(seconds=confirmation_ttl),
            examples=examples,
        )
    if as_json:
        echo_json(
            {
                "filters": filters,
                "k": k,
                "min_calls": min_calls,
                "confirmation_ttl_seconds": confirmation_ttl,
                **data,
            }
        )
        return
    print_report(data, console(), open_with=_open_with(database, clickhouse_url))


# ---------------------------------------------------------------------------------------------
# trace


@click.command("trace")
@click.argument("trace_id", required=False)
@_db_option
@click.option("--session", help="Show this session's calls in order.")
@click.option("--call-id", help="Find calls by the model's call id.")
@click.option(
    "--store",
    envvar="CALLGATE_STORE",
    default=None,
    metavar="PATH|URL",
    help="The approvals store (SQLite file or redis:// URL, env CALLGATE_STORE): deciders are "
    "shown by name, not only by the span's keyed hash.",
)
@_clickhouse_option
@_json_option
def trace_command(
    trace_id: str | None,
    database: str,
    session: str | None,
    call_id: str | None,
    store: str | None,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Rebuild a call from its trace id: stages, codes, timings, masked arguments, approvals.

    Any id may be given by an unambiguous prefix (``callgate trace 0a1b2c``). With ``--store``
    the approvals store names who decided (checked against the span's keyed hash when
    CALLGATE_MASKING_KEY is set); without it, or when it cannot be read (a warning), the hash
    is shown, labelled.

    \b
    Examples:
      callgate trace 3a936bb7 --db callgate.duckdb
      callgate trace 3a936bb7 --db callgate.duckdb --store approvals.db
      callgate trace --session s-7-00049 --db callgate.duckdb
      callgate trace --call-id call_1 --json

    Exit codes: 0 shown, 1 nothing found, an ambiguous prefix or an unreadable database, 2 bad
    options.
    """
    if sum(x is not None for x in (trace_id, session, call_id)) != 1:
        raise click.UsageError("give exactly one of TRACE_ID, --session or --call-id")
    with _source(database, clickhouse_url) as source:
        _print_lookup(
            source,
            trace_id,
            session,
            call_id,
            as_json,
            _open_with(database, clickhouse_url, store),
            store,
        )


def _open_with(database: str, clickhouse_url: str | None, store: str | None = None) -> str:
    """The options a printed ``callgate trace`` hint needs to read the same sources."""
    import shlex

    from .urls import without_password

    # Never print a password: the reader has the URL.
    source = (
        f"--clickhouse {shlex.quote(without_password(clickhouse_url))}"
        if clickhouse_url
        else f"--db {shlex.quote(database)}"
    )
    if store and not os.environ.get("CALLGATE_STORE"):
        source += f" --store {shlex.quote(without_password(store))}"
    return source


def _named_deciders(view: TraceView, store: str | None) -> TraceView:
    """``view`` with deciders named from ``store``; a store that cannot be read is a warning."""
    if not store:
        return view
    from .deciders import StoreUnreadable, approval_ids, decider_names, with_deciders

    try:
        names = decider_names(store, approval_ids(view))
    except StoreUnreadable as err:
        click.echo(f"warning: {err}; deciders are shown by their keyed hash", err=True)
        return view
    return with_deciders(view, names, os.environ.get("CALLGATE_MASKING_KEY"))


def _print_lookup(
    source: metrics.Source,
    trace_id: str | None,
    session: str | None,
    call_id: str | None,
    as_json: bool,
    open_with: str,
    store: str | None = None,
) -> None:
    """The one id rule (:func:`analytics.reconstruct.lookup`), the dashboard's too."""
    if trace_id is not None:
        query, columns, title = trace_id, ("trace_id",), f"trace {trace_id}"
    elif session is not None:
        query, columns, title = session, ("session",), f"session {session}"
    else:
        query, columns, title = call_id or "", ("call_id",), f"call id {call_id}"
    try:
        found = lookup(source, query, columns=columns)
    except AmbiguousIdError as exc:
        raise click.ClickException(f"{exc}; give more characters") from exc
    if found.trace is not None:
        view = _named_deciders(found.trace, store)
        echo_json(view) if as_json else print_trace(view, open_with=open_with)
        return
    if not found.calls:
        raise click.ClickException(
            f"no spans for {title}" if trace_id is not None else f"no calls for {title}"
        )
    title = f"{found.matched} {found.id}"
    if as_json:
        echo_json(list(found.calls))
        return
    console().print(calls_table(title, found.calls))
    for line in enumeration_lines(found.calls) if found.matched == "session" else []:
        click.echo(f"warning: {line}")


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
    """Export the spans to Parquet (one directory per day), or calls as a replay scenario.

    \b
    Examples:
      callgate export --parquet parquet/ --db callgate.duckdb
      callgate export --scenario regress.jsonl --code INVALID_ARGUMENTS --db callgate.duckdb

    Exit codes: 0 written, 1 the database could not be read, 2 bad options.
    """
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


# ---------------------------------------------------------------------------------------------
# alerts


@click.command("alerts")
@_db_option
@click.option(
    "--rules",
    "rules_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A TOML file of [[rule]] tables (docs/metrics.md, Alerts); default: the built-in rules.",
)
@click.option(
    "--at",
    "at",
    default=None,
    metavar="TIME",
    help="Evaluate as of this ISO 8601 time, or `now` (wall clock); default: the latest call stored.",
)
@click.option("--all", "show_all", is_flag=True, help="List every rule, not only firing ones.")
@confirmation_ttl_option
@_clickhouse_option
@_json_option
def alerts_command(
    database: str,
    rules_file: Path | None,
    at: str | None,
    show_all: bool,
    confirmation_ttl: float,
    clickhouse_url: str | None,
    as_json: bool,
) -> None:
    """Evaluate alert rules; print the firing ones and exit 1 when any fires, so cron can page.

    \b
    Examples:
      callgate alerts --db callgate.duckdb
      callgate alerts --rules alerts.toml --at now --json
      */5 * * * * callgate alerts --db /var/lib/callgate.duckdb || page-oncall

    Exit codes: 0 no rule fires, 1 a rule fires, 2 the rules or the database could not be read.
    """
    try:
        rules = alerts.load_rules(rules_file) if rules_file else alerts.DEFAULT_RULES
    except alerts.RulesError as exc:
        click.echo(f"error: {exc}", err=True)
        raise click.exceptions.Exit(2) from exc
    now = datetime.now(UTC).replace(tzinfo=None) if at == "now" else _time(at)
    try:
        with _source(database, clickhouse_url) as source:
            results = alerts.evaluate(
                source, rules, now=now, confirmation_ttl=timedelta(seconds=confirmation_ttl)
            )
    except click.ClickException as exc:
        click.echo(f"error: {exc.message}", err=True)
        raise click.exceptions.Exit(2) from exc
    firing = [r for r in results if r.firing]
    if as_json:
        echo_json([{**asdict_result(r), "rule": r.rule.model_dump()} for r in results])
    else:
        print_alerts(results if show_all else firing, console(), checked=len(results))
    if firing:
        raise click.exceptions.Exit(1)


@click.group("analytics")
def analytics_cli() -> None:
    """callgate analytics: load span files, report metrics, rebuild traces, export."""


for _command in (load_command, report_command, trace_command, export_command, alerts_command):
    analytics_cli.add_command(_command)

if __name__ == "__main__":  # pragma: no cover
    analytics_cli(sys.argv[1:])
