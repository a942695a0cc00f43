"""The few places where DuckDB and ClickHouse SQL differ, so each metric is written once.

A metric query reads two relations, ``calls`` and ``stages``, and trace reconstruction a third,
``spans``, with the same column names on both engines (DuckDB: the tables and views in
:mod:`analytics.schema`; ClickHouse: subqueries over the collector's ``otel_traces``, see
:mod:`analytics.clickhouse`). Everything else a query needs from the engine is here, so no caller
ever asks which engine it is talking to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DUCKDB", "Dialect"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Dialect:
    """How to spell engine-specific pieces of a metric query."""

    name: str
    calls: str
    """The ``calls`` relation: a table name or a parenthesised subquery."""
    ranked_calls: str
    """``calls`` with ``seq`` and ``next_ok_gap`` (see :func:`analytics.metrics.recovery_rate`)."""
    stages: str
    """The ``stages`` relation."""
    spans: str
    """Every span, for reconstruction: ``trace_id``, ``span_id``, ``parent_span_id``, ``name``,
    ``start_time``, ``duration_ms``, ``status_code``, ``status_message``, one column per contract
    attribute (:data:`analytics.schema.COLUMNS`: ``stage``, ``stage_outcome``, ``code``, ...),
    ``attributes`` (OTLP ``{key, value}`` structs the typed columns do not hold, or NULL) and
    ``events`` (``{timeUnixNano, name, attributes}`` structs)."""
    latency_rollup: str | None
    """A table of stage latency histograms per hour, service, tool and stage, if the engine keeps
    one (DuckDB: ``stage_latency_hist``); None to build the histogram from ``stages``."""
    latency_rollup_all: str | None
    """The same histogram per hour and stage only (all services and tools together: a sixth of
    the rows), for unfiltered queries (DuckDB: ``stage_latency_all``); None if not kept."""
    param: Callable[[str, str], str]
    """``param(name, kind)`` -> placeholder; kind is one of string, int, float, timestamp."""
    bucket: Callable[[str, int], str]
    """``bucket(timestamp_expr, seconds)`` -> the start of its epoch-aligned bucket."""
    quantiles: Callable[[str, tuple[float, ...]], str]
    """``quantiles(expr, qs)`` -> an array of the exact, linearly interpolated quantiles."""
    latency_bucket: Callable[[str], str]
    """``latency_bucket(duration_ns_expr)`` -> its log-linear histogram bucket (an integer):
    the value itself below 16, else 16 * floor(log2(d)) + the four bits after the leading one
    (16 buckets per power of two, like an OpenTelemetry exponential histogram at scale 4)."""
    arg_max: str
    """The aggregate ``arg_max(value, key)``."""
    unnest: str
    """The function that turns an array into rows in a select list."""
    value: Callable[[Any], Any]
    """Convert a Python parameter value for the driver."""
    eval_runs: str | None = None
    """The evaluation runs table (:mod:`analytics.evals`), or None where the engine keeps none
    (ClickHouse: ``callgate eval --db`` writes them to a DuckDB file)."""
    eval_cases: str | None = None
    """The evaluation case-runs table, beside ``eval_runs``."""


def _duckdb_value(value: Any) -> Any:
    return value


def _duckdb_bucket(expr: str, seconds: int) -> str:
    micros = seconds * 1_000_000
    return f"make_timestamp((epoch_us({expr}) // {micros}) * {micros})"


def _duckdb_quantiles(expr: str, qs: tuple[float, ...]) -> str:
    return f"quantile_cont({expr}, [{', '.join(repr(q) for q in qs)}])"


def _duckdb_latency_bucket(expr: str) -> str:
    e = f"floor(log2(greatest({expr}, 1)))::BIGINT"
    return (
        f"CASE WHEN {expr} < 16 THEN {expr}::BIGINT "
        f"ELSE {e} * 16 + ((({expr})::BIGINT >> ({e} - 4)) & 15) END"
    )


DUCKDB = Dialect(
    name="duckdb",
    calls="calls",
    ranked_calls="calls",
    stages="stages",
    spans="(SELECT *, duration_ns / 1e6 AS duration_ms FROM spans)",
    latency_rollup="stage_latency_hist",
    latency_rollup_all="stage_latency_all",
    param=lambda name, kind: f"${name}",
    bucket=_duckdb_bucket,
    quantiles=_duckdb_quantiles,
    latency_bucket=_duckdb_latency_bucket,
    arg_max="arg_max",
    unnest="unnest",
    value=_duckdb_value,
    eval_runs="eval_runs",
    eval_cases="eval_cases",
)
"""DuckDB over the ``spans`` table and the ``calls`` and ``stages`` relations."""
