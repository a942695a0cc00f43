"""Call latency per tool: what the caller of the guard waits for, the number an SRE pages on.

Definition (docs/metrics.md, "Call latency"): over the filtered calls (``execute_tool {tool}``
spans), per tool (and per bucket for a time series), the number of calls and the 50th, 95th and
99th percentile of the call span's duration (end - start) in milliseconds, interpolated linearly
between the two nearest ranks (DuckDB ``quantile_cont``, ClickHouse
``quantilesExactInclusive``). The call span covers every stage, the handler and its retries; a
replayed write is fast, a call that waited on the API slow.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .dialect import DUCKDB, Dialect
from .query import (
    ALL,
    Filters,
    Source,
    SqlParams,
    backend_of,
    bucket_expr,
    where_clause,
)

__all__ = ["CallLatency", "call_latency", "call_latency_query"]

_QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True, kw_only=True, slots=True)
class CallLatency:
    """Latency percentiles of one tool's calls, in milliseconds."""

    bucket: datetime | None
    tool: str
    calls: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


def call_latency_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Per (bucket, tool): the call count and the exact p50/p95/p99 of ``duration_ms``."""
    where, params = where_clause(filters, d, extra=["tool IS NOT NULL"])
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, tool, count(*) AS calls,
               {d.quantiles("duration_ms", _QUANTILES)} AS q
        FROM {d.calls} {where}
        GROUP BY 1, 2
        """,
        params,
    )


def call_latency(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[CallLatency]:
    """Call latency p50, p95 and p99 per tool (see the module docstring for the definition).

    Rows are sorted by bucket, then by calls (busiest tool first), then tool.
    """
    b = backend_of(source)
    out = []
    for r in b.fetch(*call_latency_query(filters, b.dialect, bucket=bucket)):
        p50, p95, p99 = (float(x) for x in r["q"])
        out.append(
            CallLatency(
                bucket=r["bucket"],
                tool=str(r["tool"]),
                calls=int(r["calls"]),
                p50_ms=p50,
                p95_ms=p95,
                p99_ms=p99,
            )
        )
    out.sort(key=lambda r: (r.bucket or datetime.min, -r.calls, r.tool))
    return out
