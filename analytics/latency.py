"""Stage latency percentiles, from the loader's histogram or the stage spans.

Definitions: docs/metrics.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from telemetry import attributes as attr

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

__all__ = [
    "PIPELINE_STAGES",
    "QUANTILES",
    "StageLatency",
    "stage_histogram_query",
    "stage_latency",
    "stage_latency_query",
]


PIPELINE_STAGES: tuple[str, ...] = attr.STAGES
"""Stage order, for sorting stage rows the way the pipeline runs them (the span contract's)."""

# ---------------------------------------------------------------------------------------------
# Stage latency


@dataclass(frozen=True, kw_only=True, slots=True)
class StageLatency:
    """Latency percentiles of one pipeline stage, in milliseconds."""

    bucket: datetime | None
    stage: str
    spans: int
    p50_ms: float
    p95_ms: float
    p99_ms: float


QUANTILES = (0.5, 0.95, 0.99)


def stage_latency_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Per stage: exact p50/p95/p99 of duration (linear interpolation) and the span count."""
    where, params = where_clause(filters, d)
    return (
        f"""
        SELECT {bucket_expr(d, bucket)} AS bucket, stage, count(*) AS spans,
               {d.quantiles("duration_ms", QUANTILES)} AS q
        FROM {d.stages} {where}
        GROUP BY 1, 2
        """,
        params,
    )


def _rollup_fits(filters: Filters, bucket: timedelta | None) -> bool:
    """The hourly histogram answers when no principal filter and hour-aligned times are asked."""

    def on_the_hour(t: datetime | None) -> bool:
        return t is None or (t.minute, t.second, t.microsecond) == (0, 0, 0)

    hourly = bucket is None or bucket.total_seconds() % 3600 == 0
    return (
        not filters.principals
        and on_the_hour(filters.start)
        and on_the_hour(filters.end)
        and (hourly)
    )


def stage_histogram_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """The histogram buckets that hold the ranks the percentiles need, step by step.

    1. ``hist``: span counts per (bucket, stage, duration bucket), from the loader's hourly
       ``stage_latency_hist`` when the filters fit it (no principal filter, whole hours; its
       ``stage_latency_all`` sum over services and tools when neither is filtered), else from
       the stage spans with the same bucket function (16 buckets per power of two).
    2. ``ranked``: per (bucket, stage), the running count up to each duration bucket and the
       total ``n``.
    3. Keep only the duration buckets that contain rank floor((n - 1) q) or the rank after it,
       for q in QUANTILES: at most six rows per stage go back to Python.
    """
    if d.latency_rollup and _rollup_fits(filters, bucket):
        hourly = Filters(
            start=filters.start, end=filters.end, services=filters.services, tools=filters.tools
        )
        where, params = where_clause(hourly, d)
        where = where.replace("start_time", "hour")
        everything = not filters.services and not filters.tools and d.latency_rollup_all
        table = d.latency_rollup_all if everything else d.latency_rollup
        hist = (
            f"SELECT {bucket_expr(d, bucket, 'hour')} AS bucket, stage, bucket AS lat, "
            f"sum(spans) AS c FROM {table} {where} GROUP BY 1, 2, 3 "
            "HAVING sum(spans) > 0"
        )
    else:
        where, params = where_clause(filters, d)
        hist = (
            f"SELECT {bucket_expr(d, bucket)} AS bucket, stage, "
            f"{d.latency_bucket('duration_ns')} AS lat, count(*) AS c "
            f"FROM {d.stages} {where} GROUP BY 1, 2, 3"
        )
    wanted = " OR ".join(
        f"(cum - c <= floor((n - 1) * {q}) + {extra} AND floor((n - 1) * {q}) + {extra} < cum)"
        for q in QUANTILES
        for extra in (0, 1)
    )
    return (
        f"""
        WITH hist AS ({hist}),
        ranked AS (
            SELECT bucket, stage, lat, c,
                   sum(c) OVER (PARTITION BY bucket, stage ORDER BY lat
                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
                   sum(c) OVER (PARTITION BY bucket, stage) AS n
            FROM hist
            WHERE stage IS NOT NULL
        )
        SELECT bucket, stage, lat, c, cum, n FROM ranked WHERE {wanted}
        """,
        params,
    )


def _bucket_bounds(lat: int) -> tuple[float, float]:
    """The duration range in ns of histogram bucket ``lat`` (see Dialect.latency_bucket)."""
    if lat < 16:
        return float(lat), float(lat)
    exponent, sub = divmod(lat, 16)
    width = 1 << (exponent - 4)
    low = (16 + sub) * width
    return float(low), float(low + width)


def _percentiles(n: int, rows: list[tuple[int, int, int]]) -> list[float]:
    """[p50, p95, p99] in ms from the (bucket, count, running count) rows holding the ranks.

    The value of rank r (0-based) is placed evenly inside its bucket; a percentile interpolates
    between ranks floor(h) and floor(h) + 1, h = (n - 1) q, as ``quantile_cont`` does on exact
    values.
    """

    def value(rank: int) -> float:
        for lat, count, cum in rows:
            if cum - count <= rank < cum:
                low, high = _bucket_bounds(lat)
                return low + (high - low) * (rank - cum + count + 0.5) / count
        return _bucket_bounds(rows[-1][0])[1]

    out = []
    for q in QUANTILES:
        h = (n - 1) * q
        below = math.floor(h)
        v = value(below)
        if h > below:
            v += (h - below) * (value(below + 1) - v)
        out.append(v / 1e6)
    return out


def stage_latency(
    source: Source,
    filters: Filters = ALL,
    *,
    bucket: timedelta | None = None,
    exact: bool = False,
) -> list[StageLatency]:
    """Stage latency p50, p95 and p99.

    Definition: over the ``guard.<stage>`` spans of the filtered calls, the 50th, 95th and 99th
    percentile of span duration (end - start) per stage, in milliseconds, interpolated linearly
    between the two nearest ranks. Stages are in pipeline order.

    By default the percentiles come from a log-linear histogram (16 buckets per power of two, as
    an OpenTelemetry exponential histogram at scale 4; the loader keeps it per hour, service and
    tool): each is within about 3% of the exact value and reads a table far smaller than the
    spans. ``exact=True`` sorts the durations instead.
    """
    b = backend_of(source)
    order = {s: i for i, s in enumerate(PIPELINE_STAGES)}
    out: list[StageLatency] = []
    if exact:
        for r in b.fetch(*stage_latency_query(filters, b.dialect, bucket=bucket)):
            if r["stage"]:
                p50, p95, p99 = (float(x) for x in r["q"])
                out.append(
                    StageLatency(
                        bucket=r["bucket"],
                        stage=r["stage"],
                        spans=int(r["spans"]),
                        p50_ms=p50,
                        p95_ms=p95,
                        p99_ms=p99,
                    )
                )
    else:
        groups: dict[tuple[datetime | None, str], list[tuple[int, int, int]]] = {}
        totals: dict[tuple[datetime | None, str], int] = {}
        for r in b.fetch(*stage_histogram_query(filters, b.dialect, bucket=bucket)):
            key = (r["bucket"], r["stage"])
            groups.setdefault(key, []).append((int(r["lat"]), int(r["c"]), int(r["cum"])))
            totals[key] = int(r["n"])
        for (bkt, stage), rows in groups.items():
            n = totals[bkt, stage]
            p50, p95, p99 = _percentiles(n, sorted(rows))
            out.append(
                StageLatency(bucket=bkt, stage=stage, spans=n, p50_ms=p50, p95_ms=p95, p99_ms=p99)
            )
    out.sort(key=lambda r: (r.bucket or datetime.min, order.get(r.stage, 99), r.stage))
    return out
