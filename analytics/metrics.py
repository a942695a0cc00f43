"""The metrics: one named query each, with its definition, on DuckDB or ClickHouse.

Every metric is a pair: a query builder ``<metric>_query(filters, dialect, ...) -> (sql, params)``
that returns SQL with named parameters, and a function ``<metric>(source, filters, ...)`` that runs
it and returns a list of frozen dataclasses, the plain data the dashboard and ``callgate report``
consume. ``source`` is a DuckDB connection or any :class:`Backend` (ClickHouse: see
:mod:`analytics.clickhouse`); the SQL is the same on both, up to :class:`~analytics.dialect.Dialect`.

All metrics take a :class:`Filters` (time range, services, tools, principals) and a ``bucket``:
``None`` for one row per group, or a :class:`~datetime.timedelta` for a time series (rows then carry
the start of their epoch-aligned bucket). Written definitions: docs/metrics.md; each function's
docstring repeats its definition.

This module is the one import for all of them. The overview lives here; the others live by theme,
to keep modules short: :mod:`analytics.rejections` (rejection rate, invalid fields),
:mod:`analytics.recovery` (recovery rate, replays, loop guards), :mod:`analytics.confirmations`,
:mod:`analytics.latency`, and :mod:`analytics.query` (filters and backends).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .confirmations import (
    DEFAULT_CONFIRMATION_TTL,
    ConfirmationFunnel,
    confirmation_funnel,
    confirmation_funnel_query,
)
from .dialect import DUCKDB, Dialect
from .latency import (
    PIPELINE_STAGES,
    QUANTILES,
    StageLatency,
    stage_histogram_query,
    stage_latency,
    stage_latency_query,
)
from .query import (
    ALL,
    Backend,
    DuckDBBackend,
    Filters,
    Source,
    SqlParams,
    backend_of,
    bucket_expr,
    rows_as,
    where_clause,
)
from .recovery import (
    FIXABLE_DEFAULT_K,
    LOOP_GUARD_CODES,
    CallRef,
    CodeRecovery,
    LoopGuard,
    Recovery,
    Replays,
    StuckSession,
    calls_matching,
    calls_matching_query,
    loop_guards,
    loop_guards_query,
    recovery_by_code,
    recovery_by_code_query,
    recovery_rate,
    recovery_rate_query,
    replays,
    replays_query,
    stuck_sessions,
    stuck_sessions_query,
    unrecovered_calls,
    unrecovered_calls_query,
)
from .rejections import (
    CallCount,
    InvalidField,
    RejectionExample,
    RejectionRate,
    call_counts,
    call_counts_query,
    invalid_calls_query,
    invalid_fields,
    invalid_fields_query,
    rejection_examples,
    rejection_examples_query,
    rejection_rate,
    rejection_rate_query,
)

__all__ = [
    "ALL",
    "DEFAULT_CONFIRMATION_TTL",
    "FIXABLE_DEFAULT_K",
    "LOOP_GUARD_CODES",
    "PIPELINE_STAGES",
    "QUANTILES",
    "Backend",
    "CallCount",
    "CallRef",
    "CodeRecovery",
    "ConfirmationFunnel",
    "DuckDBBackend",
    "FilterOptions",
    "Filters",
    "InvalidField",
    "LoopGuard",
    "Overview",
    "Recovery",
    "RejectionExample",
    "RejectionRate",
    "Replays",
    "Source",
    "SqlParams",
    "StageLatency",
    "StuckSession",
    "call_counts",
    "call_counts_query",
    "calls_matching",
    "calls_matching_query",
    "confirmation_funnel",
    "confirmation_funnel_query",
    "filter_options",
    "invalid_calls_query",
    "invalid_fields",
    "invalid_fields_query",
    "loop_guards",
    "loop_guards_query",
    "overview",
    "overview_query",
    "recovery_by_code",
    "recovery_by_code_query",
    "recovery_rate",
    "recovery_rate_query",
    "rejection_examples",
    "rejection_examples_query",
    "rejection_rate",
    "rejection_rate_query",
    "replays",
    "replays_query",
    "stage_histogram_query",
    "stage_latency",
    "stage_latency_query",
    "stuck_sessions",
    "stuck_sessions_query",
    "unrecovered_calls",
    "unrecovered_calls_query",
]


# ---------------------------------------------------------------------------------------------
# Overview and filter options


@dataclass(frozen=True, kw_only=True, slots=True)
class Overview:
    """Totals over the filtered calls."""

    bucket: datetime | None
    calls: int
    ok: int
    rejected: int
    sessions: int
    principals: int
    first: datetime | None
    last: datetime | None


def overview_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Count calls, successes, rejections, distinct sessions and principals, and the time span."""
    where, params = where_clause(filters, d)
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket,
               count(*) AS calls,
               sum(CASE WHEN ok THEN 1 ELSE 0 END) AS ok,
               sum(CASE WHEN ok THEN 0 ELSE 1 END) AS rejected,
               count(DISTINCT session) AS sessions,
               count(DISTINCT principal) AS principals,
               min(start_time) AS first,
               max(start_time) AS last
        FROM {d.calls} {where}
        GROUP BY 1 ORDER BY 1
        """,
        params,
    )


def overview(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[Overview]:
    """Totals: calls, ok, rejected (any code but OK), sessions, principals, first and last call."""
    b = backend_of(source)
    rows = [r for r in b.fetch(*overview_query(filters, b.dialect, bucket=bucket)) if r["calls"]]
    return rows_as(Overview, rows)


@dataclass(frozen=True, kw_only=True, slots=True)
class FilterOptions:
    """The values the filters can take, for pickers."""

    services: tuple[str, ...]
    tools: tuple[str, ...]
    principals: tuple[str, ...]
    first: datetime | None
    last: datetime | None


def filter_options(source: Source) -> FilterOptions:
    """Distinct services, tools and principals, and the time span of all calls."""
    b = backend_of(source)
    d = b.dialect
    values: dict[str, tuple[str, ...]] = {}
    for column in ("service", "tool", "principal"):
        sql = f"SELECT DISTINCT {column} AS v FROM {d.calls} WHERE {column} IS NOT NULL ORDER BY 1"
        values[column] = tuple(str(r["v"]) for r in b.fetch(sql, {}) if r["v"])
    span = b.fetch(f"SELECT min(start_time) AS first, max(start_time) AS last FROM {d.calls}", {})
    return FilterOptions(
        services=values["service"],
        tools=values["tool"],
        principals=values["principal"],
        first=span[0]["first"] if span else None,
        last=span[0]["last"] if span else None,
    )
