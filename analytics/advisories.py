"""Warnings: calls that went through with advice for the model, per tool and warning code.

A business check may let a call through with a warning (``ctx.warn``); the call span then carries
``guard.warnings`` (how many) and ``guard.warning_codes``. Definitions (also in docs/metrics.md):

- **warnings**: per tool and warning code, how many calls carried that warning (a call with two
  codes counts once for each);
- **calls**: the denominator, every call of the tool in the filter;
- the share is warnings / calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .dialect import DUCKDB, Dialect
from .query import ALL, Filters, Source, SqlParams, backend_of, bucket_expr, rows_as, where_clause

__all__ = ["WarningCount", "tool_calls_query", "warning_counts", "warning_counts_query"]


@dataclass(frozen=True, kw_only=True, slots=True)
class WarningCount:
    """Calls of one tool that carried one warning code."""

    bucket: datetime | None
    tool: str
    code: str
    """The warning's code (usually a domain code, e.g. ``SAME_ITEM``)."""
    warnings: int
    calls: int
    """The denominator: calls of the tool in the bucket."""

    @property
    def share(self) -> float | None:
        """warnings / calls."""
        return self.warnings / self.calls if self.calls else None


def warning_counts_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Explode ``warning_codes`` of the calls that carry any and count per (bucket, tool, code)."""
    where, params = where_clause(filters, d, extra=["coalesce(warnings, 0) > 0"])
    return (
        f"""
        SELECT bucket, tool, code, count(*) AS warnings FROM (
            SELECT {bucket_expr(d, bucket)} AS bucket, tool, {d.unnest}(warning_codes) AS code
            FROM {d.calls} {where}
        ) AS exploded
        GROUP BY 1, 2, 3
        """,
        params,
    )


def tool_calls_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Count the filtered calls per (bucket, tool): the denominators of :func:`warning_counts`."""
    where, params = where_clause(filters, d)
    return (
        f"SELECT {bucket_expr(d, bucket)} AS bucket, tool, count(*) AS calls "
        f"FROM {d.calls} {where} GROUP BY 1, 2",
        params,
    )


def warning_counts(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[WarningCount]:
    """Warnings per tool and code, most frequent first, with the tool's calls as denominator."""
    b = backend_of(source)
    totals = {
        (r["bucket"], r["tool"]): int(r["calls"])
        for r in b.fetch(*tool_calls_query(filters, b.dialect, bucket=bucket))
    }
    rows = [
        {**r, "warnings": int(r["warnings"]), "calls": totals.get((r["bucket"], r["tool"]), 0)}
        for r in b.fetch(*warning_counts_query(filters, b.dialect, bucket=bucket))
    ]
    rows.sort(
        key=lambda r: (
            r["bucket"] is not None,
            r["bucket"] or 0,
            -r["warnings"],
            r["tool"],
            r["code"],
        )
    )
    return rows_as(WarningCount, rows)
