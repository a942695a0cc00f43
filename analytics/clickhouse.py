"""The same metrics on ClickHouse, over the OpenTelemetry Collector ClickHouse exporter's table.

The exporter writes ``otel_traces``: one row per span, the span's attributes in ``SpanAttributes``
(``Map(LowCardinality(String), String)``: every value as text, arrays as JSON), ``StatusCode`` and
``SpanKind`` as strings, spelled ``STATUS_CODE_ERROR``/``SPAN_KIND_INTERNAL`` by older exporter
versions and ``Error``/``Internal`` by newer ones. :data:`CLICKHOUSE` defines the ``calls``,
ranked calls and ``stages`` relations over that table with the column names and types of DuckDB's,
so :mod:`analytics.metrics` runs unchanged: ``metrics.recovery_rate(ChdbBackend(session))``.

Backends: :class:`ChdbBackend` (in-process chDB, used by the tests) and
:class:`ClickHouseConnectBackend` (a real server through clickhouse-connect, for ``callgate report
--clickhouse URL``). :func:`export_otel_traces` writes DuckDB's spans in the exporter's shape, so
both engines can be fed the same spans.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import duckdb

from telemetry import attributes as A

from .dialect import Dialect
from .schema import _CALL_COLUMNS, COLUMNS, Column

__all__ = [
    "CLICKHOUSE",
    "OTEL_TRACES_DDL",
    "ChdbBackend",
    "ClickHouseConnectBackend",
    "connect_url",
    "export_otel_traces",
]

OTEL_TRACES_DDL = """
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    `Events.Timestamp` Array(DateTime64(9)) CODEC(ZSTD(1)),
    `Events.Name` Array(LowCardinality(String)) CODEC(ZSTD(1)),
    `Events.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1)),
    `Links.TraceId` Array(String) CODEC(ZSTD(1)),
    `Links.SpanId` Array(String) CODEC(ZSTD(1)),
    `Links.TraceState` Array(String) CODEC(ZSTD(1)),
    `Links.Attributes` Array(Map(LowCardinality(String), String)) CODEC(ZSTD(1))
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
"""
"""The exporter's table (columns as the contrib ClickHouse exporter creates them), for tests."""


def _attr(name: str, sql_type: str, attrs: str = "SpanAttributes") -> str:
    """A contract attribute out of the string map, typed like DuckDB's column; NULL if absent."""
    raw = f"{attrs}['{name}']"
    if sql_type == "BOOLEAN":
        return f"if(mapContains({attrs}, '{name}'), toBool({raw} = 'true'), NULL)"
    if sql_type == "BIGINT":
        return f"toInt64OrNull({raw})"
    if sql_type == "DOUBLE":
        return f"toFloat64OrNull({raw})"
    if sql_type == "VARCHAR[]":
        return f"JSONExtract({raw}, 'Array(String)')"
    return f"nullIf({raw}, '')"


_STATUS = (
    "multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2, "
    "StatusCode IN ('Ok', 'STATUS_CODE_OK'), 1, 0)"
)
"""The OTLP status number, from either spelling of ``StatusCode``."""

_CONTRACT_KEYS = "[" + ", ".join(f"'{c.attribute}'" for c in COLUMNS) + "]"

_TEXT_LIST = "Array(Tuple(key String, value Tuple(stringValue String)))"
"""Attributes as OTLP ``{key, value: {stringValue}}`` structs: the exporter keeps only text."""


def _text_list(keys: str, values: str) -> str:
    return f"CAST(arrayMap((k, v) -> (k, tuple(v)), {keys}, {values}), '{_TEXT_LIST}')"


_EXTRA = "mapFilter((k, v) -> NOT has(" + _CONTRACT_KEYS + ", k), SpanAttributes)"

_EVENTS = (
    "CAST(arrayMap((t, n, a) -> (toUInt64(toUnixTimestamp64Nano(t)), n, "
    + _text_list("mapKeys(a)", "mapValues(a)")
    + "), `Events.Timestamp`, `Events.Name`, `Events.Attributes`), "
    f"'Array(Tuple(timeUnixNano UInt64, name String, attributes {_TEXT_LIST}))')"
)

_SPANS = (
    "(SELECT lower(TraceId) AS trace_id, SpanId AS span_id, "
    "nullIf(ParentSpanId, '') AS parent_span_id, SpanName AS name, ServiceName AS service, "
    "toDateTime64(Timestamp, 6, 'UTC') AS start_time, Duration / 1e6 AS duration_ms, "
    f"toInt64(Duration) AS duration_ns, {_STATUS} AS status_code, "
    "nullIf(StatusMessage, '') AS status_message, "
    + ", ".join(f"{_attr(c.attribute, c.sql_type)} AS {c.name}" for c in COLUMNS)
    + ", if(empty("
    + _EXTRA
    + "), NULL, "
    + _text_list(f"mapKeys({_EXTRA})", f"mapValues({_EXTRA})")
    + f") AS attributes, {_EVENTS} AS events FROM otel_traces)"
)
"""One row per span with DuckDB's ``spans`` column names: the contract attributes typed out of the
string map, the rest (attributes the contract does not have) as a text list."""

_CALL_NAMES = ", ".join(c.name for c in _CALL_COLUMNS)

_CALLS = (
    "(SELECT trace_id, span_id, service, start_time, duration_ms, duration_ns, status_code, "
    f"{_CALL_NAMES}, code FROM {_SPANS} WHERE startsWith(name, '{A.CALL_SPAN_PREFIX}'))"
)

_RANKED = f"""(
    SELECT *,
           min(if(ok, seq, NULL)) OVER (
               PARTITION BY session, tool ORDER BY seq
               ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) - seq AS next_ok_gap
    FROM (
        SELECT *, row_number() OVER (
            PARTITION BY session ORDER BY start_time, step, span_id) AS seq
        FROM {_CALLS}
    )
)"""

_STAGES = f"""(
    SELECT s.trace_id AS trace_id, s.span_id AS span_id, s.parent_span_id AS parent_span_id,
           s.service AS service, s.start_time AS start_time, s.duration_ms AS duration_ms,
           s.duration_ns AS duration_ns, s.stage AS stage,
           s.stage_outcome AS stage_outcome, s.code AS code,
           c.tool AS tool, c.session AS session, c.principal AS principal, c.call_id AS call_id
    FROM (
        SELECT trace_id, span_id, parent_span_id, service, start_time, duration_ms, duration_ns,
               stage, stage_outcome, code
        FROM {_SPANS}
        WHERE startsWith(name, '{A.STAGE_SPAN_PREFIX}') AND name != '{A.SETTLED_SPAN}'
    ) AS s
    LEFT JOIN (SELECT trace_id, span_id, tool, session, principal, call_id FROM {_CALLS}) AS c
        ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
)"""

_PARAM_TYPES = {
    "string": "String",
    "int": "Int64",
    "float": "Float64",
    "timestamp": "DateTime64(6, 'UTC')",
}


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


CLICKHOUSE = Dialect(
    name="clickhouse",
    calls=_CALLS,
    ranked_calls=_RANKED,
    stages=_STAGES,
    spans=_SPANS,
    latency_rollup=None,
    latency_rollup_all=None,
    param=lambda name, kind: "{" + f"{name}:{_PARAM_TYPES[kind]}" + "}",
    bucket=lambda expr, seconds: (
        f"fromUnixTimestamp64Micro(intDiv(toUnixTimestamp64Micro({expr}), {seconds * 1_000_000})"
        f" * {seconds * 1_000_000}, 'UTC')"
    ),
    quantiles=lambda expr, qs: f"quantilesExactInclusive({', '.join(map(repr, qs))})({expr})",
    latency_bucket=lambda d: (
        f"if({d} < 16, {d}, toInt64(floor(log2(greatest({d}, 16)))) * 16 + "
        f"bitAnd(bitShiftRight({d}, toInt64(floor(log2(greatest({d}, 16)))) - 4), 15))"
    ),
    arg_max="argMax",
    unnest="arrayJoin",
    value=_value,
)
"""ClickHouse over ``otel_traces``."""


_SETTINGS = "\nSETTINGS prefer_column_name_to_alias = 1"
"""Metric SQL names results after columns (``sum(...) AS ok``); ClickHouse must read ``ok`` in
expressions as the column, as standard SQL does, not as the alias."""


def _plain(value: Any) -> Any:
    """Driver values as DuckDB returns them: naive UTC datetimes, lists, ints."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class ChdbBackend:
    """A :class:`~analytics.metrics.Backend` over an in-process chDB session."""

    dialect = CLICKHOUSE

    def __init__(self, session: Any) -> None:
        self._session = session

    def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run ``sql`` in the session; rows as dicts."""
        table = self._session.query(sql + _SETTINGS, "ArrowTable", params=dict(params) or None)
        return [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]


class ClickHouseConnectBackend:
    """A :class:`~analytics.metrics.Backend` over a clickhouse-connect client."""

    dialect = CLICKHOUSE

    def __init__(self, client: Any) -> None:
        self._client = client

    def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run ``sql`` on the server; rows as dicts."""
        result = self._client.query(sql + _SETTINGS, parameters=dict(params))
        names = list(result.column_names)
        return [
            {n: _plain(v) for n, v in zip(names, row, strict=True)} for row in result.result_rows
        ]


def connect_url(url: str) -> ClickHouseConnectBackend:
    """A backend for ``url`` (``http://user:password@host:8123/database``) via clickhouse-connect."""
    try:
        import clickhouse_connect  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "callgate report --clickhouse needs clickhouse-connect: pip install clickhouse-connect"
        ) from exc
    return ClickHouseConnectBackend(clickhouse_connect.get_client(dsn=url))


_TEXT = (
    "coalesce(a.value.stringValue, a.value.intValue::VARCHAR, "
    "CASE a.value.boolValue WHEN true THEN 'true' WHEN false THEN 'false' END, "
    "a.value.doubleValue::VARCHAR, "
    "CASE WHEN a.value.arrayValue IS NOT NULL THEN to_json(list_transform("
    'from_json(a.value.arrayValue, \'{"values":[{"stringValue":"VARCHAR"}]}\')."values", '
    "lambda v: v.stringValue))::VARCHAR END, a.value.kvlistValue::VARCHAR, a.value.bytesValue, '')"
)


def _typed_text(column: Column) -> str:
    if column.sql_type == "VARCHAR[]":
        return f"to_json({column.name})::VARCHAR"
    return f"{column.name}::VARCHAR"


_TYPED_MAP = (
    "map_from_entries(list_filter(["
    + ", ".join(f"{{'k': '{c.attribute}', 'v': {_typed_text(c)}}}" for c in COLUMNS)
    + "], lambda e: e.v IS NOT NULL))"
)
"""A span's contract attributes as the exporter's string map, from the typed columns."""

_KINDS_NEW = ["Unspecified", "Internal", "Server", "Client", "Producer", "Consumer"]
_STATUS_NEW = ["Unset", "Ok", "Error"]


def export_otel_traces(
    con: duckdb.DuckDBPyConnection,
    path: str | os.PathLike[str],
    *,
    spelling: Literal["new", "old", "mixed"] = "new",
) -> int:
    """Write the stored spans as ``otel_traces`` rows to a Parquet file; return the row count.

    ``spelling`` picks the StatusCode/SpanKind strings: ``new`` (``Error``, ``Internal``),
    ``old`` (``STATUS_CODE_ERROR``, ``SPAN_KIND_INTERNAL``) or ``mixed`` (alternating by span, as
    a table written across an exporter upgrade would hold).
    """
    old = "(hash(span_id) % 2 = 0)" if spelling == "mixed" else str(spelling == "old").upper()
    kinds = "[" + ", ".join(f"'{k}'" for k in _KINDS_NEW) + "]"
    statuses = "[" + ", ".join(f"'{s}'" for s in _STATUS_NEW) + "]"
    sql = f"""
    COPY (
        SELECT
            start_time::TIMESTAMP_NS AS Timestamp,
            trace_id AS TraceId, span_id AS SpanId, coalesce(parent_span_id, '') AS ParentSpanId,
            '' AS TraceState, name AS SpanName,
            CASE WHEN {old}
                 THEN 'SPAN_KIND_' || upper(['UNSPECIFIED', 'INTERNAL', 'SERVER', 'CLIENT',
                                            'PRODUCER', 'CONSUMER'][coalesce(kind, 0) + 1])
                 ELSE {kinds}[coalesce(kind, 0) + 1] END AS SpanKind,
            coalesce(service, '') AS ServiceName,
            MAP {{'service.name': coalesce(service, '')}} AS ResourceAttributes,
            coalesce(scope, '') AS ScopeName, '' AS ScopeVersion,
            CASE WHEN attributes IS NOT NULL
                 THEN map_from_entries(list_transform(attributes,
                                                      lambda a: {{'k': a.key, 'v': {_TEXT}}}))
                 ELSE {_TYPED_MAP} END AS SpanAttributes,
            duration_ns::UBIGINT AS Duration,
            CASE WHEN {old}
                 THEN 'STATUS_CODE_' || upper({statuses}[status_code + 1])
                 ELSE {statuses}[status_code + 1] END AS StatusCode,
            coalesce(status_message, '') AS StatusMessage,
            list_transform(coalesce(events, []),
                           lambda e: make_timestamp_ns(TRY_CAST(e.timeUnixNano AS BIGINT))) AS "Events.Timestamp",
            list_transform(coalesce(events, []), lambda e: e.name) AS "Events.Name",
            list_transform(coalesce(events, []), lambda e: map_from_entries(list_transform(
                e.attributes, lambda a: {{'k': a.key, 'v': {_TEXT}}}))) AS "Events.Attributes"
        FROM spans
    ) TO '{os.fspath(path).replace("'", "''")}' (FORMAT parquet)
    """
    con.execute(sql)
    return int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])
