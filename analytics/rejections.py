"""Rejections: rejection rate per tool and code, and the fields behind INVALID_ARGUMENTS.

Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

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
from .shadow import ENFORCED_CODE_SQL

__all__ = [
    "CallCount",
    "InvalidField",
    "RejectionExample",
    "RejectionRate",
    "call_counts",
    "call_counts_query",
    "invalid_calls_query",
    "invalid_fields",
    "invalid_fields_query",
    "rejection_examples",
    "rejection_examples_query",
    "rejection_rate",
    "rejection_rate_query",
]


# ---------------------------------------------------------------------------------------------
# Rejection rate


@dataclass(frozen=True, kw_only=True, slots=True)
class CallCount:
    """Calls per tool and code: the raw counts behind the rejection rates."""

    bucket: datetime | None
    tool: str | None
    code: str | None
    calls: int


def call_counts_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Count the filtered calls per (bucket, tool, code): one scan of typed columns."""
    where, params = where_clause(filters, d)
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, tool, {ENFORCED_CODE_SQL} AS code,
               count(*) AS calls
        FROM {d.calls} {where}
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        """,
        params,
    )


def call_counts(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[CallCount]:
    """Calls per tool and code (the raw counts behind :func:`rejection_rate`)."""
    b = backend_of(source)
    return rows_as(CallCount, b.fetch(*call_counts_query(filters, b.dialect, bucket=bucket)))


@dataclass(frozen=True, kw_only=True, slots=True)
class RejectionRate:
    """A rejection rate with its denominator."""

    bucket: datetime | None
    tool: str | None
    """The tool, or None when grouped by code only."""
    code: str | None
    """The code, or None when grouped by tool only."""
    calls: int
    """The denominator: calls of the tool (or all calls, when grouped by code only)."""
    rejected: int
    """Calls not OK (grouped by tool) or calls that ended with ``code``."""
    rate: float | None
    """rejected / calls; None when calls is below the ``min_calls`` floor."""


def rejection_rate_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    by: Literal["tool", "code", "tool_code"] = "tool",
    bucket: timedelta | None = None,
) -> SqlParams:
    """Numerators and denominators in one pass.

    Per tool: group the calls by (bucket, tool); calls = count, rejected = count of not OK.
    Per code (or tool and code): group by (bucket, [tool,] code); the denominator is the sum of
    the group counts over the bucket (and tool), a window over the grouped rows; OK rows are
    dropped after the window has counted them. The code is the one the model got
    (``ENFORCED_CODE_SQL``): a shadow call is counted by what happened, never by what the gate
    would have decided (``analytics.shadow``).
    """
    where, params = where_clause(filters, d)
    b = bucket_expr(d, bucket)
    if by == "tool":
        return (
            f"""
            SELECT {b} AS bucket, tool, NULL AS code, count(*) AS calls,
                   sum(CASE WHEN ok THEN 0 ELSE 1 END) AS rejected
            FROM {d.calls} {where}
            GROUP BY 1, 2
            """,
            params,
        )
    tool = "tool" if by == "tool_code" else "NULL"
    return (
        f"""
        SELECT bucket, tool, code, calls, rejected FROM (
            SELECT {b} AS bucket, {tool} AS tool, {ENFORCED_CODE_SQL} AS code,
                   count(*) AS rejected,
                   sum(count(*)) OVER (PARTITION BY {b}, {tool}) AS calls
            FROM {d.calls} {where}
            GROUP BY 1, 2, 3
        ) AS grouped
        WHERE code <> 'OK'
        """,
        params,
    )


def rejection_rate(
    source: Source,
    filters: Filters = ALL,
    *,
    by: Literal["tool", "code", "tool_code"] = "tool",
    min_calls: int = 20,
    bucket: timedelta | None = None,
) -> list[RejectionRate]:
    """Rejection rate per tool, per code, or per tool and code.

    Definition: a call is rejected when ``guard.ok`` is false (it ended with any code but OK,
    including CONFIRMATION_REQUIRED). Per tool: rejected calls of the tool / calls of the tool.
    Per code: calls that ended with the code / all calls. Per tool and code: calls of the tool
    that ended with the code / calls of the tool. The denominator is always returned; the rate
    is None when it is below ``min_calls``, so one failed call does not read as 100%.
    Rows are sorted by bucket, then rate (highest first).
    """
    b = backend_of(source)
    out = [
        RejectionRate(
            bucket=r["bucket"],
            tool=r["tool"],
            code=r["code"],
            calls=int(r["calls"]),
            rejected=int(r["rejected"]),
            rate=floored_rate(int(r["rejected"]), int(r["calls"]), min_calls),
        )
        for r in b.fetch(*rejection_rate_query(filters, b.dialect, by=by, bucket=bucket))
    ]
    out.sort(
        key=lambda r: (
            r.bucket or datetime.min,
            -(r.rate if r.rate is not None else -1.0),
            -r.rejected,
            r.tool or "",
            r.code or "",
        )
    )
    return out


# ---------------------------------------------------------------------------------------------
# INVALID_ARGUMENTS fields


@dataclass(frozen=True, kw_only=True, slots=True)
class InvalidField:
    """A field named in INVALID_ARGUMENTS rejections."""

    bucket: datetime | None
    tool: str
    field: str
    """JSON pointer of the field, e.g. ``/amount_cents``."""
    calls: int
    """INVALID_ARGUMENTS calls of the tool that named this field."""
    invalid_calls: int
    """All INVALID_ARGUMENTS calls of the tool: the denominator of ``share``."""
    share: float
    """calls / invalid_calls."""


def invalid_fields_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Explode ``invalid_fields`` of INVALID_ARGUMENTS calls and count per (tool, field)."""
    where, params = where_clause(filters, d, extra=["code = 'INVALID_ARGUMENTS'"])
    return (
        f"""
        SELECT bucket, tool, field, count(*) AS calls
        FROM (
            SELECT {bucket_expr(d, bucket)} AS bucket, tool, {d.unnest}(invalid_fields) AS field
            FROM {d.calls} {where}
        )
        GROUP BY 1, 2, 3
        """,
        params,
    )


def invalid_calls_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Count INVALID_ARGUMENTS calls per tool: the denominators of :func:`invalid_fields`."""
    where, params = where_clause(filters, d, extra=["code = 'INVALID_ARGUMENTS'"])
    return (
        f"SELECT {bucket_expr(d, bucket)} AS bucket, tool, count(*) AS calls "
        f"FROM {d.calls} {where} GROUP BY 1, 2",
        params,
    )


def invalid_fields(
    source: Source, filters: Filters = ALL, *, limit: int = 10, bucket: timedelta | None = None
) -> list[InvalidField]:
    """Top failing fields behind INVALID_ARGUMENTS, per tool.

    Definition: for each tool, the JSON pointers in ``guard.invalid_fields`` of its
    INVALID_ARGUMENTS calls, with how many calls named each; a call naming two fields counts for
    both. ``share`` is that count over the tool's INVALID_ARGUMENTS calls. The ``limit`` most
    frequent (per bucket) are returned, most frequent first.
    """
    b = backend_of(source)
    rows = b.fetch(*invalid_fields_query(filters, b.dialect, bucket=bucket))
    totals = {
        (r["bucket"], r["tool"]): int(r["calls"])
        for r in b.fetch(*invalid_calls_query(filters, b.dialect, bucket=bucket))
    }
    out = [
        InvalidField(
            bucket=r["bucket"],
            tool=r["tool"],
            field=r["field"],
            calls=int(r["calls"]),
            invalid_calls=totals[r["bucket"], r["tool"]],
            share=int(r["calls"]) / totals[r["bucket"], r["tool"]],
        )
        for r in rows
    ]
    out.sort(key=lambda r: (r.bucket or datetime.min, -r.calls, r.tool, r.field))
    kept: dict[datetime | None, int] = {}
    limited = []
    for r in out:
        kept[r.bucket] = kept.get(r.bucket, 0) + 1
        if kept[r.bucket] <= limit:
            limited.append(r)
    return limited


# ---------------------------------------------------------------------------------------------
# Example traces per code


@dataclass(frozen=True, kw_only=True, slots=True)
class RejectionExample:
    """One recent call that ended with a code: the trace to open from a rate."""

    code: str
    tool: str | None
    start_time: datetime
    trace_id: str


def rejection_examples_query(filters: Filters, d: Dialect = DUCKDB, *, n: int) -> SqlParams:
    """Per code (calls that are not OK), the ``n`` latest calls: rank by start time, keep the top."""
    where, params = where_clause(filters, d, extra=["NOT coalesce(ok, false)", "code IS NOT NULL"])
    params["n"] = n
    return (
        f"""
        SELECT code, tool, start_time, trace_id
        FROM (
            SELECT code, tool, start_time, trace_id,
                   row_number() OVER (PARTITION BY code ORDER BY start_time DESC, trace_id) AS rank
            FROM {d.calls} {where}
        ) AS ranked
        WHERE rank <= {d.param("n", "int")}
        ORDER BY code, start_time DESC
        """,
        params,
    )


def rejection_examples(
    source: Source, filters: Filters = ALL, *, n: int = 3
) -> list[RejectionExample]:
    """The latest ``n`` traces per rejection code, so a rate leads to a call without SQL.

    Definition: among the filtered calls that are not OK, per ``guard.code``, the ``n`` with the
    latest start (ties by trace id), newest first.
    """
    b = backend_of(source)
    return rows_as(RejectionExample, b.fetch(*rejection_examples_query(filters, b.dialect, n=n)))
