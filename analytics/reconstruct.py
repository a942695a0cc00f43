"""Incident reconstruction: rebuild a call from its trace, a session's calls, a call by its call id.

On DuckDB everything comes from the ``spans`` table (the full record, every attribute as sent)
and ``calls``; on ClickHouse from the exporter's ``otel_traces`` (attributes as the exporter keeps
them: text) and the same ``calls`` relation the metrics use. Results are frozen dataclasses that
:func:`to_jsonable` turns into plain JSON data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

import duckdb

from .query import Backend, Source, backend_of, rows_as
from .schema import COLUMNS

__all__ = [
    "CallSummary",
    "Event",
    "SpanNode",
    "TraceView",
    "calls_by_call_id",
    "calls_with_code",
    "session_calls",
    "to_jsonable",
    "trace",
]

AttributeValue = str | int | float | bool | list[Any] | dict[str, Any] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """A span event, e.g. a retry of the handler (``guard.retry``)."""

    name: str
    time: datetime
    attributes: dict[str, AttributeValue]


@dataclass(frozen=True, kw_only=True, slots=True)
class SpanNode:
    """One span of a trace with its children, in start order."""

    span_id: str
    parent_span_id: str | None
    name: str
    start_time: datetime
    duration_ms: float
    status_code: int
    status_message: str | None
    stage: str | None
    """The stage, for ``guard.<stage>`` spans."""
    stage_outcome: str | None
    code: str | None
    attributes: dict[str, AttributeValue]
    """Every attribute as sent (arguments are masked by the writer)."""
    events: tuple[Event, ...]
    children: tuple[SpanNode, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class CallSummary:
    """One tool call, as a line in a session's history."""

    trace_id: str
    span_id: str
    start_time: datetime
    duration_ms: float
    service: str | None
    session: str | None
    principal: str | None
    step: int | None
    tool: str | None
    call_id: str | None
    code: str | None
    ok: bool | None
    rejected_stage: str | None
    replayed: bool | None
    confirmed: bool | None
    resumed: bool | None
    approval_id: str | None
    approval_outcome: str | None
    attempts: int | None
    outcome: str | None
    arguments: str | None
    """Masked arguments."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceView:
    """A trace rebuilt: its span tree, its call(s), and the approval history around them."""

    trace_id: str
    roots: tuple[SpanNode, ...]
    calls: tuple[CallSummary, ...]
    approvals: tuple[CallSummary, ...]
    """Every call (any trace) sharing an approval id with this trace's calls, in time order: the
    call that asked for a human and the resumption that carried the decision."""


_SUMMARY_COLUMNS = [f.name for f in fields(CallSummary)]


def _value(value: dict[str, Any] | None) -> AttributeValue:
    if value is None:
        return None
    for key in ("stringValue", "intValue", "boolValue", "doubleValue", "bytesValue"):
        if value.get(key) is not None:
            result: AttributeValue = value[key]
            return result
    for key in ("arrayValue", "kvlistValue"):
        if value.get(key) is not None:
            decoded = json.loads(value[key])
            if key == "arrayValue":
                return [_value(v) for v in decoded.get("values", [])]
            return {kv["key"]: _value(kv.get("value")) for kv in decoded.get("values", [])}
    return None


def _attributes(raw: list[dict[str, Any]] | None) -> dict[str, AttributeValue]:
    return {a["key"]: _value(a["value"]) for a in raw or ()}


def _span_attributes(row: tuple[Any, ...]) -> dict[str, AttributeValue]:
    """All attributes of a span: its typed contract columns, or the full list when it was kept
    (the loader keeps it when something did not fit the typed columns)."""
    if row[10] is not None:
        return _attributes(row[10])
    return {
        column.attribute: value
        for column, value in zip(COLUMNS, row[12:], strict=True)
        if value is not None
    }


def _summaries(
    source: Source, column: str, values: list[str], *, limit: int | None = None
) -> list[CallSummary]:
    """The calls whose ``column`` is one of ``values``, in the order they were made."""
    b = backend_of(source)
    d = b.dialect
    names = [f"v{i}" for i in range(len(values))]
    placeholders = ", ".join(d.param(n, "string") for n in names)
    params: dict[str, Any] = dict(zip(names, values, strict=True))
    tail = ""
    if limit is not None:
        tail = f" LIMIT {d.param('limit', 'int')}"
        params["limit"] = limit
    sql = (
        f"SELECT {', '.join(_SUMMARY_COLUMNS)} FROM {d.ranked_calls} "
        f"WHERE {column} IN ({placeholders}) ORDER BY start_time, seq{tail}"
    )
    return rows_as(CallSummary, b.fetch(sql, params))


def _span_rows(source: Source, trace_id: str) -> list[tuple[Any, ...]]:
    """The trace's spans as rows: span_id, parent, name, start, ms, status code and message,
    stage, stage outcome, code, attribute list (or None), events, then the typed columns."""
    if isinstance(source, duckdb.DuckDBPyConnection):
        typed = ", ".join(c.name for c in COLUMNS)
        return source.execute(
            f"""
            SELECT span_id, parent_span_id, name, start_time, duration_ns / 1e6, status_code,
                   status_message, stage, stage_outcome, code, attributes, events, {typed}
            FROM spans WHERE trace_id = ? ORDER BY start_time, span_id
            """,
            [trace_id],
        ).fetchall()
    return _clickhouse_span_rows(source, trace_id)


def _clickhouse_span_rows(backend: Backend, trace_id: str) -> list[tuple[Any, ...]]:
    # The exporter keeps every attribute as text in a map; they come back as an attribute list,
    # so the tree shows them as stored (the typed columns stay empty).
    rows = backend.fetch(
        f"""
        SELECT SpanId AS span_id, nullIf(ParentSpanId, '') AS parent_span_id, SpanName AS name,
               toDateTime64(Timestamp, 6, 'UTC') AS start_time, Duration / 1e6 AS duration_ms,
               multiIf(StatusCode IN ('Error', 'STATUS_CODE_ERROR'), 2,
                       StatusCode IN ('Ok', 'STATUS_CODE_OK'), 1, 0) AS status_code,
               nullIf(StatusMessage, '') AS status_message,
               nullIf(SpanAttributes['guard.stage.name'], '') AS stage,
               nullIf(SpanAttributes['guard.stage.outcome'], '') AS stage_outcome,
               nullIf(SpanAttributes['guard.code'], '') AS code,
               mapKeys(SpanAttributes) AS keys, mapValues(SpanAttributes) AS values,
               arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`) AS event_ns,
               `Events.Name` AS event_names,
               arrayMap(a -> mapKeys(a), `Events.Attributes`) AS event_keys,
               arrayMap(a -> mapValues(a), `Events.Attributes`) AS event_values
        FROM otel_traces WHERE lower(TraceId) = {backend.dialect.param("trace", "string")}
        ORDER BY start_time, span_id
        """,
        {"trace": trace_id},
    )
    empty = (None,) * len(COLUMNS)
    return [
        (
            r["span_id"],
            r["parent_span_id"],
            r["name"],
            r["start_time"],
            r["duration_ms"],
            r["status_code"],
            r["status_message"],
            r["stage"],
            r["stage_outcome"],
            r["code"],
            _text_list(r["keys"], r["values"]),
            [
                {"name": name, "timeUnixNano": ns, "attributes": _text_list(keys, values)}
                for ns, name, keys, values in zip(
                    r["event_ns"], r["event_names"], r["event_keys"], r["event_values"], strict=True
                )
            ],
            *empty,
        )
        for r in rows
    ]


def _text_list(keys: list[str], values: list[str]) -> list[dict[str, Any]]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in zip(keys, values, strict=True)]


def trace(source: Source, trace_id: str) -> TraceView | None:
    """Rebuild the trace ``trace_id``; None when no span of it is stored."""
    rows = _span_rows(source, trace_id.lower())
    if not rows:
        return None
    children: dict[str | None, list[tuple[Any, ...]]] = {}
    ids = {row[0] for row in rows}
    for row in rows:
        parent = row[1] if row[1] in ids else None
        children.setdefault(parent, []).append(row)

    def build(row: tuple[Any, ...]) -> SpanNode:
        events = tuple(
            Event(
                name=e["name"],
                time=datetime.fromtimestamp(e["timeUnixNano"] / 1e9, UTC).replace(tzinfo=None),
                attributes=_attributes(e["attributes"]),
            )
            for e in row[11] or ()
        )
        return SpanNode(
            span_id=row[0],
            parent_span_id=row[1],
            name=row[2],
            start_time=row[3],
            duration_ms=row[4],
            status_code=row[5],
            status_message=row[6],
            stage=row[7],
            stage_outcome=row[8],
            code=row[9],
            attributes=_span_attributes(row),
            events=events,
            children=tuple(build(child) for child in children.get(row[0], ())),
        )

    calls = _summaries(source, "trace_id", [trace_id.lower()])
    approval_ids = sorted({c.approval_id for c in calls if c.approval_id})
    approvals = _summaries(source, "approval_id", approval_ids) if approval_ids else []
    return TraceView(
        trace_id=trace_id.lower(),
        roots=tuple(build(row) for row in children.get(None, ())),
        calls=tuple(calls),
        approvals=tuple(approvals),
    )


def session_calls(source: Source, session: str) -> list[CallSummary]:
    """The calls of ``session`` in the order they were made."""
    return _summaries(source, "session", [session])


def calls_by_call_id(source: Source, call_id: str) -> list[CallSummary]:
    """The calls with the model's call id ``call_id`` (usually one)."""
    return _summaries(source, "call_id", [call_id])


def calls_with_code(source: Source, code: str, *, limit: int = 20) -> list[CallSummary]:
    """The first ``limit`` calls that ended with ``code``, oldest first (incidents to open)."""
    return _summaries(source, "code", [code], limit=limit)


def to_jsonable(value: Any) -> Any:
    """Dataclasses, datetimes and tuples as plain JSON data (times as ISO 8601, UTC)."""
    if hasattr(value, "__dataclass_fields__"):
        return to_jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat() + ("Z" if value.tzinfo is None else "")
    return value
