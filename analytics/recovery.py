"""Where agents get stuck: recovery after fixable rejections, replays, loop guards.

Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .dialect import DUCKDB, Dialect
from .query import (
    ALL,
    Filters,
    Source,
    SqlParams,
    backend_of,
    bucket_expr,
    floored_rate,
    rows_as,
    where_clause,
)

__all__ = [
    "FIXABLE_DEFAULT_K",
    "LOOP_GUARD_CODES",
    "CallRef",
    "CodeRecovery",
    "LoopGuard",
    "Recovery",
    "Replays",
    "StuckSession",
    "calls_matching",
    "calls_matching_query",
    "loop_guards",
    "loop_guards_query",
    "recovery_by_code",
    "recovery_by_code_query",
    "recovery_rate",
    "recovery_rate_query",
    "replays",
    "replays_query",
    "stuck_sessions",
    "stuck_sessions_query",
    "unrecovered_calls",
    "unrecovered_calls_query",
]


FIXABLE_DEFAULT_K = 3
"""Recovery looks this many calls ahead unless told otherwise."""


LOOP_GUARD_CODES: tuple[str, ...] = ("LOOP_DETECTED", "STEP_LIMIT", "VALIDATION_BUDGET_EXHAUSTED")
"""The codes that mean an agent was stopped from going round in circles."""


# ---------------------------------------------------------------------------------------------
# Recovery rate


@dataclass(frozen=True, kw_only=True, slots=True)
class Recovery:
    """How often a fixable rejection was followed by a good call."""

    bucket: datetime | None
    tool: str
    rejected: int
    """Calls of the tool rejected with a fixable code: the denominator."""
    recovered: int
    """Of those, followed by an OK call to the same tool within the next ``k`` calls."""
    rate: float | None
    """recovered / rejected; None below the ``min_calls`` floor."""


def recovery_rate_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    k: int = FIXABLE_DEFAULT_K,
    bucket: timedelta | None = None,
) -> SqlParams:
    """Count fixable rejections, and those whose ``next_ok_gap`` is at most ``k``.

    ``next_ok_gap`` comes with the ranked calls relation: number the calls of each session 1, 2,
    ... by start time (not by step: a call resumed after a human's approval has step 0 but comes
    after the proposal it resumes; all calls of the session, whatever the filters: the next calls count whatever
    tool they use and whenever they ran), then for each call take the number of the next OK call
    to the same tool in that session, minus its own. DuckDB keeps it as a column of ``calls``,
    maintained at load time; ClickHouse computes it with the same two window functions.
    """
    return _recovery_query(filters, d, "tool", k=k, bucket=bucket)


def _recovery_query(
    filters: Filters, d: Dialect, by: str, *, k: int, bucket: timedelta | None
) -> SqlParams:
    where, params = where_clause(filters, d, extra=["fixable", "NOT ok"])
    params["k"] = k
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, {by},
               count(*) AS rejected,
               sum(CASE WHEN next_ok_gap <= {d.param("k", "int")} THEN 1 ELSE 0 END) AS recovered
        FROM {d.ranked_calls} {where}
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )


def _recovery_counts(
    source: Source, filters: Filters, by: str, *, k: int, bucket: timedelta | None
) -> list[tuple[dict[str, Any], int, int]]:
    """(row, rejected, recovered) per group of ``by``."""
    if k < 1:
        raise ValueError("k must be at least 1")
    b = backend_of(source)
    rows = b.fetch(*_recovery_query(filters, b.dialect, by, k=k, bucket=bucket))
    return [(r, int(r["rejected"]), int(r["recovered"])) for r in rows]


def recovery_rate(
    source: Source,
    filters: Filters = ALL,
    *,
    k: int = FIXABLE_DEFAULT_K,
    min_calls: int = 20,
    bucket: timedelta | None = None,
) -> list[Recovery]:
    """Recovery rate per tool.

    Definition: of the calls rejected with a code the model can fix (``guard.fixable`` true),
    the share followed by an OK call to the same tool in the same session within the next ``k``
    calls of that session (any tool; default 3). Low recovery means the rejection messages do
    not tell the model how to fix the call.
    """
    return [
        Recovery(
            bucket=r["bucket"],
            tool=r["tool"],
            rejected=rejected,
            recovered=recovered,
            rate=floored_rate(recovered, rejected, min_calls),
        )
        for r, rejected, recovered in _recovery_counts(source, filters, "tool", k=k, bucket=bucket)
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeRecovery:
    """How often a fixable rejection with one code was followed by a good call."""

    bucket: datetime | None
    code: str
    rejected: int
    recovered: int
    rate: float | None
    """recovered / rejected; None below the ``min_calls`` floor."""


def recovery_by_code_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    k: int = FIXABLE_DEFAULT_K,
    bucket: timedelta | None = None,
) -> SqlParams:
    """:func:`recovery_rate_query` grouped by the rejecting code instead of the tool."""
    return _recovery_query(filters, d, "code", k=k, bucket=bucket)


def recovery_by_code(
    source: Source,
    filters: Filters = ALL,
    *,
    k: int = FIXABLE_DEFAULT_K,
    min_calls: int = 20,
    bucket: timedelta | None = None,
) -> list[CodeRecovery]:
    """Recovery rate per rejecting code: the same definition as :func:`recovery_rate`.

    A code whose rejections rarely recover has a message that does not tell the model what to do.
    """
    return [
        CodeRecovery(
            bucket=r["bucket"],
            code=r["code"],
            rejected=rejected,
            recovered=recovered,
            rate=floored_rate(recovered, rejected, min_calls),
        )
        for r, rejected, recovered in _recovery_counts(source, filters, "code", k=k, bucket=bucket)
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallRef:
    """One call to open: enough to find its trace."""

    trace_id: str
    call_id: str | None
    session: str | None
    principal: str | None
    service: str | None
    tool: str | None
    code: str | None
    start_time: datetime
    step: int | None
    arguments: str | None
    """The masked arguments, as on the span."""


_CALL_REF = (
    "trace_id, call_id, session, principal, service, tool, code, start_time, step, arguments"
)


def unrecovered_calls_query(
    filters: Filters, d: Dialect = DUCKDB, *, k: int = FIXABLE_DEFAULT_K, limit: int = 50
) -> SqlParams:
    """Fixable rejections whose ``next_ok_gap`` is missing or beyond ``k``, newest first."""
    where, params = where_clause(
        filters,
        d,
        extra=[
            "fixable",
            "NOT ok",
            f"coalesce(next_ok_gap, {d.param('k', 'int')} + 1) > {d.param('k', 'int')}",
        ],
    )
    params["k"] = k
    params["limit"] = limit
    return (
        f"""
        SELECT {_CALL_REF} FROM {d.ranked_calls} {where}
        ORDER BY start_time DESC LIMIT {d.param("limit", "int")}
        """,
        params,
    )


def unrecovered_calls(
    source: Source, filters: Filters = ALL, *, k: int = FIXABLE_DEFAULT_K, limit: int = 50
) -> list[CallRef]:
    """The calls that never recovered: fixable rejections not followed by an OK call to the same
    tool in the same session within the next ``k`` calls. Newest first."""
    b = backend_of(source)
    return rows_as(CallRef, b.fetch(*unrecovered_calls_query(filters, b.dialect, k=k, limit=limit)))


def calls_matching_query(
    filters: Filters, d: Dialect = DUCKDB, *, code: str, tool: str | None = None, limit: int = 20
) -> SqlParams:
    """The filtered calls that ended with ``code`` (of ``tool``), newest first."""
    extra = [f"code = {d.param('code', 'string')}"]
    if tool is not None:
        extra.append(f"tool = {d.param('tool', 'string')}")
    where, params = where_clause(filters, d, extra=extra)
    params.update(code=code, limit=limit)
    if tool is not None:
        params["tool"] = tool
    return (
        f"""
        SELECT {_CALL_REF} FROM {d.calls} {where}
        ORDER BY start_time DESC LIMIT {d.param("limit", "int")}
        """,
        params,
    )


def calls_matching(
    source: Source,
    filters: Filters = ALL,
    *,
    code: str,
    tool: str | None = None,
    limit: int = 20,
) -> list[CallRef]:
    """Example calls behind a number: those that ended with ``code`` (of ``tool``), newest first."""
    b = backend_of(source)
    return rows_as(
        CallRef,
        b.fetch(*calls_matching_query(filters, b.dialect, code=code, tool=tool, limit=limit)),
    )


# ---------------------------------------------------------------------------------------------
# Replays and loop guards


@dataclass(frozen=True, kw_only=True, slots=True)
class Replays:
    """Repeated writes answered from the idempotency store."""

    bucket: datetime | None
    tool: str
    calls: int
    replayed: int
    sessions: int
    """Sessions with at least one replay of this tool."""


def replays_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Per tool: calls, replayed calls, and distinct sessions among the replayed ones."""
    where, params = where_clause(filters, d)
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, tool, count(*) AS calls,
               sum(CASE WHEN replayed THEN 1 ELSE 0 END) AS replayed,
               count(DISTINCT CASE WHEN replayed THEN session END) AS sessions
        FROM {d.calls} {where}
        GROUP BY 1, 2
        HAVING sum(CASE WHEN replayed THEN 1 ELSE 0 END) > 0
        ORDER BY 1, 4 DESC, 2
        """,
        params,
    )


def replays(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[Replays]:
    """Replays per tool.

    Definition: calls with ``guard.replayed`` true, i.e. a write repeated with the same
    idempotency key and answered with the original result, no second side effect; with the
    number of sessions they happened in. Tools without replays are left out.
    """
    b = backend_of(source)
    return rows_as(Replays, b.fetch(*replays_query(filters, b.dialect, bucket=bucket)))


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopGuard:
    """Calls stopped by a loop guard."""

    bucket: datetime | None
    tool: str
    code: str
    """LOOP_DETECTED, STEP_LIMIT or VALIDATION_BUDGET_EXHAUSTED."""
    calls: int
    sessions: int
    """Distinct sessions affected."""


def loop_guards_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Per (tool, code) among the loop-guard codes: calls and distinct sessions."""
    codes = ", ".join(f"'{c}'" for c in LOOP_GUARD_CODES)
    where, params = where_clause(filters, d, extra=[f"code IN ({codes})"])
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, tool, code, count(*) AS calls,
               count(DISTINCT session) AS sessions
        FROM {d.calls} {where}
        GROUP BY 1, 2, 3 ORDER BY 1, 4 DESC, 2, 3
        """,
        params,
    )


def loop_guards(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[LoopGuard]:
    """Loop guards per tool and code.

    Definition: calls that ended with LOOP_DETECTED (the same call repeated too often),
    STEP_LIMIT (too many calls in the session or turn) or VALIDATION_BUDGET_EXHAUSTED (too many
    invalid calls in a row), with the number of distinct sessions they stopped. These are where
    agents get stuck.
    """
    b = backend_of(source)
    return rows_as(LoopGuard, b.fetch(*loop_guards_query(filters, b.dialect, bucket=bucket)))


@dataclass(frozen=True, kw_only=True, slots=True)
class StuckSession:
    """A session that hit loop guards or replays."""

    session: str
    principal: str | None
    service: str | None
    calls: int
    loop_guards: int
    replays: int
    first: datetime
    last: datetime


def stuck_sessions_query(filters: Filters, d: Dialect = DUCKDB, *, limit: int = 20) -> SqlParams:
    """Sessions with loop guards or replays, worst first: the most loop guards and replays
    together (each one a call the model repeated), then the most loop guards, then the most calls."""
    codes = ", ".join(f"'{c}'" for c in LOOP_GUARD_CODES)
    hit = f"(code IN ({codes}) OR replayed)"
    where, params = where_clause(filters, d)
    # Only sessions with a hit are grouped (most sessions have none): found first, in one pass.
    affected, _ = where_clause(filters, d, extra=[hit])
    session_filter = f"session IN (SELECT session FROM {d.calls} {affected})"
    where = f"{where} AND {session_filter}" if where else f"WHERE {session_filter}"
    params["limit"] = limit
    return (
        f"""
        SELECT session, min(principal) AS principal, min(service) AS service,
               count(*) AS calls,
               sum(CASE WHEN code IN ({codes}) THEN 1 ELSE 0 END) AS loop_guards,
               sum(CASE WHEN replayed THEN 1 ELSE 0 END) AS replays,
               min(start_time) AS first, max(start_time) AS last
        FROM {d.calls} {where}
        GROUP BY session
        HAVING sum(CASE WHEN code IN ({codes}) THEN 1 ELSE 0 END) > 0
            OR sum(CASE WHEN replayed THEN 1 ELSE 0 END) > 0
        ORDER BY loop_guards + replays DESC, loop_guards DESC, calls DESC, session
        LIMIT {d.param("limit", "int")}
        """,
        params,
    )


def stuck_sessions(
    source: Source, filters: Filters = ALL, *, limit: int = 20
) -> list[StuckSession]:
    """The sessions affected by loop guards and replays, worst first (for drill-down)."""
    b = backend_of(source)
    return rows_as(StuckSession, b.fetch(*stuck_sessions_query(filters, b.dialect, limit=limit)))
