"""Incident reconstruction: rebuild a call from its trace, a session's calls, a call by its call id.

Everything comes from the ``spans`` table (the full record, every attribute as sent) and ``calls``;
results are frozen dataclasses that :func:`to_jsonable` turns into plain JSON data.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

import duckdb

from .schema import COLUMNS

__all__ = [
    "CALL_SUMMARY_SQL",
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

CALL_SUMMARY_SQL = f"SELECT {', '.join(_SUMMARY_COLUMNS)} FROM calls"
"""The columns of a :class:`CallSummary`; callers add WHERE and ORDER BY."""


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


def _summaries(con: duckdb.DuckDBPyConnection, where: str, params: list[Any]) -> list[CallSummary]:
    rows = con.execute(f"{CALL_SUMMARY_SQL} WHERE {where} ORDER BY start_time, seq", params)
    return [CallSummary(**dict(zip(_SUMMARY_COLUMNS, row, strict=True))) for row in rows.fetchall()]


def trace(con: duckdb.DuckDBPyConnection, trace_id: str) -> TraceView | None:
    """Rebuild the trace ``trace_id``; None when no span of it is stored."""
    typed = ", ".join(c.name for c in COLUMNS)
    rows = con.execute(
        f"""
        SELECT span_id, parent_span_id, name, start_time, duration_ns / 1e6, status_code,
               status_message, stage, stage_outcome, code, attributes, events, {typed}
        FROM spans WHERE trace_id = ? ORDER BY start_time, span_id
        """,
        [trace_id.lower()],
    ).fetchall()
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

    calls = _summaries(con, "trace_id = ?", [trace_id.lower()])
    approval_ids = sorted({c.approval_id for c in calls if c.approval_id})
    approvals: list[CallSummary] = []
    if approval_ids:
        marks = ", ".join("?" for _ in approval_ids)
        approvals = _summaries(con, f"approval_id IN ({marks})", approval_ids)
    return TraceView(
        trace_id=trace_id.lower(),
        roots=tuple(build(row) for row in children.get(None, ())),
        calls=tuple(calls),
        approvals=tuple(approvals),
    )


def session_calls(con: duckdb.DuckDBPyConnection, session: str) -> list[CallSummary]:
    """The calls of ``session`` in the order they were made."""
    return _summaries(con, "session = ?", [session])


def calls_by_call_id(con: duckdb.DuckDBPyConnection, call_id: str) -> list[CallSummary]:
    """The calls with the model's call id ``call_id`` (usually one)."""
    return _summaries(con, "call_id = ?", [call_id])


def calls_with_code(
    con: duckdb.DuckDBPyConnection, code: str, *, limit: int = 20
) -> list[CallSummary]:
    """The first ``limit`` calls that ended with ``code``, oldest first (incidents to open)."""
    rows = con.execute(
        f"{CALL_SUMMARY_SQL} WHERE code = ? ORDER BY start_time, seq LIMIT ?", [code, limit]
    )
    return [CallSummary(**dict(zip(_SUMMARY_COLUMNS, row, strict=True))) for row in rows.fetchall()]


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
