"""Incident reconstruction: rebuild a call from its trace, a session's calls, a call by its call id.

On DuckDB everything comes from the ``spans`` table (the full record, every attribute as sent)
and ``calls``; on ClickHouse from the exporter's ``otel_traces`` (attributes as the exporter keeps
them: text) and the same ``calls`` relation the metrics use. Results are frozen dataclasses that
:func:`to_jsonable` turns into plain JSON data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from .query import Backend, Source, backend_of, rows_as
from .schema import COLUMNS

__all__ = [
    "AmbiguousIdError",
    "CallSummary",
    "Event",
    "Lookup",
    "SpanNode",
    "TraceView",
    "calls_by_call_id",
    "calls_with_code",
    "enumeration_runs",
    "lookup",
    "resolve_id",
    "session_calls",
    "tainting_call",
    "to_jsonable",
    "trace",
    "value_source_call",
]

AttributeValue = str | int | float | bool | list[Any] | dict[str, Any] | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """A span event, e.g. a retry of the handler (``guard.retry``)."""

    name: str
    time: datetime | None
    """None when the event's time was not a 64-bit number of nanoseconds."""
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
    message: str | None = None
    """The message the model received (masked)."""
    fixable: bool | None = None
    """The model can fix the call by resending it corrected."""
    untrusted: bool | None = None
    """The tool returned untrusted outside text: from this call on, the session is tainted."""
    injection_detected: bool | None = None
    """Instruction-like text was found in that untrusted result."""
    injection_rule: str | None = None
    """The detector rule that matched."""
    injection_excerpt: str | None = None
    """The matched text with some context either side, masked (the evidence)."""
    approved_by: str | None = None
    """Keyed hash of who decided a resumed call (``guard.approval.by``)."""
    decided_by_name: str | None = None
    """The decider's name from the approvals store, when one was given (:mod:`analytics.deciders`)."""
    decider_matches_span: bool | None = None
    """Whether that name hashes to ``approved_by`` (None: not checked, no masking key)."""
    approval_decided_at: float | None = None
    """When the decision was taken, seconds since the epoch by the guard's clock."""
    approval_wait_ms: float | None = None
    """How long after the request the decision came."""
    approval_reason: str | None = None
    """Why a human was asked (``guard.approval.reason``): TAINTED_CONTEXT, UNTRUSTED_VALUE or
    CONFIRMATION_REQUIRED."""
    provenance_field: str | None = None
    """UNTRUSTED_VALUE: the sink argument whose value made the call wait."""
    provenance_value: str | None = None
    """UNTRUSTED_VALUE: that value, masked."""
    provenance_source_tool: str | None = None
    """UNTRUSTED_VALUE: the tool whose untrusted result first held it."""
    provenance_source_step: int | None = None
    """UNTRUSTED_VALUE: that call's step in the session (see :func:`value_source_call`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceView:
    """A trace rebuilt: its span tree, its call(s), and the approval history around them."""

    trace_id: str
    roots: tuple[SpanNode, ...]
    calls: tuple[CallSummary, ...]
    approvals: tuple[CallSummary, ...]
    """Every call (any trace) sharing an approval id with this trace's calls, in time order: the
    call that asked for a human and the resumption that carried the decision."""
    tainted_by: tuple[CallSummary, ...] = ()
    """For a call of this trace that ended ``TAINTED_CONTEXT``: the call that tainted its session
    (see :func:`tainting_call`)."""
    value_from: tuple[CallSummary, ...] = ()
    """For a call of this trace that ended ``UNTRUSTED_VALUE``: the earlier call whose untrusted
    result held the sink argument's value (see :func:`value_source_call`)."""


_FROM_THE_STORE = frozenset({"decided_by_name", "decider_matches_span"})
"""CallSummary fields the approvals store fills in (:mod:`analytics.deciders`), not the database."""
_SUMMARY_COLUMNS = [f.name for f in fields(CallSummary) if f.name not in _FROM_THE_STORE]


def _value(value: dict[str, Any] | None) -> AttributeValue:
    if value is None:
        return None
    if value.get("intValue") is not None:  # stored as text (OTLP JSON sends int64 as a string)
        try:
            return int(value["intValue"])
        except ValueError:
            return str(value["intValue"])
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
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
    # a null or keyless entry can stand in a span file the loader kept: skip it, keep the trace
    return {
        a["key"]: _value(a.get("value")) for a in raw or () if isinstance(a, dict) and "key" in a
    }


def _span_attributes(row: dict[str, Any]) -> dict[str, AttributeValue]:
    """All attributes of a span: its typed contract columns, then its attribute list (what the
    typed columns do not hold: on DuckDB the whole list as sent, kept when something did not fit;
    on ClickHouse the attributes the contract does not name). An empty array is no attribute:
    ClickHouse arrays cannot be NULL, so an absent one reads as ``[]``."""
    typed: dict[str, AttributeValue] = {
        column.attribute: row[column.name]
        for column in COLUMNS
        if row[column.name] is not None and row[column.name] != []
    }
    return typed | _attributes(row["attributes"])


def _summaries(
    source: Source,
    column: str,
    values: list[str],
    *,
    limit: int | None = None,
    real_steps: bool = True,
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
    calls = rows_as(CallSummary, b.fetch(sql, params))
    return _with_real_steps(b, calls) if real_steps else calls


def _with_real_steps(backend: Backend, calls: list[CallSummary]) -> list[CallSummary]:
    """Resumed calls with the step of the call that asked for the human.

    A resumption skips the budget stage, so its span says step 0: the step the session was at is
    the request's (same approval id, not resumed).
    """
    unstepped = sorted({c.approval_id for c in calls if c.resumed and not c.step and c.approval_id})
    if not unstepped:
        return calls
    requests = _summaries(backend, "approval_id", unstepped, real_steps=False)
    steps = {r.approval_id: r.step for r in requests if not r.resumed and r.step}
    return [
        replace(c, step=steps[c.approval_id])
        if c.resumed and not c.step and c.approval_id in steps
        else c
        for c in calls
    ]


def tainting_call(source: Source, call: CallSummary) -> CallSummary | None:
    """The call that tainted ``call``'s session: the first earlier call of the session that
    returned untrusted outside text (``guard.untrusted``); None when there is none stored.

    From that call on, the guard asks a human before any write in the session
    (``TAINTED_CONTEXT``); its ``injection_detected`` and ``injection_rule`` say what was found.
    """
    if call.session is None:
        return None
    b = backend_of(source)
    d = b.dialect
    sql = (
        f"SELECT {', '.join(_SUMMARY_COLUMNS)} FROM {d.ranked_calls} "
        f"WHERE session = {d.param('session', 'string')} AND untrusted "
        f"AND start_time <= {d.param('before', 'timestamp')} "
        f"AND span_id <> {d.param('span', 'string')} ORDER BY start_time, seq LIMIT 1"
    )
    found = rows_as(
        CallSummary,
        b.fetch(
            sql, {"session": call.session, "before": d.value(call.start_time), "span": call.span_id}
        ),
    )
    return found[0] if found else None


def value_source_call(source: Source, call: CallSummary) -> CallSummary | None:
    """The call whose untrusted result held the value that made ``call`` wait (``UNTRUSTED_VALUE``):
    in the same session, the latest call at or before it with the step and tool its span names
    (``guard.provenance.source.step`` and ``.tool``); None when the span names none (the value
    was seen nowhere) or that call is not stored."""
    if call.session is None or call.provenance_source_step is None:
        return None
    b = backend_of(source)
    d = b.dialect
    sql = (
        f"SELECT {', '.join(_SUMMARY_COLUMNS)} FROM {d.ranked_calls} "
        f"WHERE session = {d.param('session', 'string')} "
        f"AND step = {d.param('step', 'int')} AND tool = {d.param('tool', 'string')} "
        f"AND start_time <= {d.param('before', 'timestamp')} "
        f"AND span_id <> {d.param('span', 'string')} ORDER BY start_time DESC, seq DESC LIMIT 1"
    )
    params = {
        "session": call.session,
        "step": call.provenance_source_step,
        "tool": call.provenance_source_tool,
        "before": d.value(call.start_time),
        "span": call.span_id,
    }
    found = rows_as(CallSummary, b.fetch(sql, params))
    return found[0] if found else None


class AmbiguousIdError(LookupError):
    """An id prefix matches more than one id; the message lists some of them."""


_ID_COLUMNS = {"trace_id": "trace", "session": "session", "call_id": "call id"}


def resolve_id(source: Source, column: str, prefix: str) -> str | None:
    """The one ``column`` value (``trace_id``, ``session`` or ``call_id``) that is ``prefix`` or
    starts with it; None when none does.

    An exact match wins; otherwise the prefix must be unambiguous, or :class:`AmbiguousIdError`
    is raised naming a few of the candidates.
    """
    if column not in _ID_COLUMNS:
        raise ValueError(f"ids are looked up in {', '.join(_ID_COLUMNS)}, not {column}")
    b = backend_of(source)
    d = b.dialect
    wanted = prefix.lower() if column == "trace_id" else prefix
    rows = b.fetch(
        f"SELECT DISTINCT {column} AS id FROM {d.calls} "
        f"WHERE substring({column}, 1, {d.param('n', 'int')}) = {d.param('prefix', 'string')} "
        f"ORDER BY id LIMIT 6",
        {"n": len(wanted), "prefix": wanted},
    )
    ids = [r["id"] for r in rows]
    if wanted in ids or len(ids) <= 1:
        return wanted if wanted in ids else (ids[0] if ids else None)
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    raise AmbiguousIdError(f"{_ID_COLUMNS[column]} {prefix!r} is ambiguous: {shown}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Lookup:
    """What an id found: one trace, or the calls of a session or with a call id."""

    trace: TraceView | None = None
    calls: tuple[CallSummary, ...] = ()
    """The trace's calls, or the calls matched by session or call id (each links to its trace)."""
    matched: str = ""
    """What the id matched: "trace", "session", "call id", or "" (nothing)."""
    id: str = ""
    """The full id the query resolved to (a prefix is completed by :func:`resolve_id`)."""


LOOKUP_ORDER: tuple[str, ...] = ("trace_id", "session", "call_id")
"""Where an id is looked for, in order: the first column it resolves in wins."""


def lookup(source: Source, query: str, *, columns: Sequence[str] = LOOKUP_ORDER) -> Lookup:
    """Find ``query`` as a trace id, then a session, then a call id (or only in ``columns``).

    The one id rule for ``callgate trace`` and the dashboard's Trace explorer: an exact id or an
    unambiguous prefix (:func:`resolve_id`); an ambiguous prefix raises :class:`AmbiguousIdError`.
    """
    query = query.strip()
    if not query:
        return Lookup()
    for column in columns:
        full = resolve_id(source, column, query)
        if full is None:
            continue
        matched = _ID_COLUMNS[column]
        if column == "trace_id":
            view = trace(source, full)
            if view is not None:
                return Lookup(trace=view, calls=view.calls, matched=matched, id=full)
            continue
        found = (
            session_calls(source, full) if column == "session" else calls_by_call_id(source, full)
        )
        if found:
            return Lookup(calls=tuple(found), matched=matched, id=full)
    return Lookup()


@dataclass(frozen=True, kw_only=True, slots=True)
class EnumerationRun:
    """Consecutive calls of one tool, each refused, whose arguments differ only in one number
    that moves a little each time (ORD-9085, ORD-9086, ...): somebody probing for ids."""

    tool: str | None
    code: str | None
    calls: tuple[CallSummary, ...]

    @property
    def first(self) -> str:
        """The first call's masked arguments."""
        return self.calls[0].arguments or ""

    @property
    def last(self) -> str:
        """The last call's masked arguments."""
        return self.calls[-1].arguments or ""


ENUMERATION_CODES: tuple[str, ...] = ("NOT_FOUND",)
"""Codes whose runs on neighbouring ids are flagged: the answer a missing or foreign id gets."""

_NUMBER = re.compile(r"\d+")


def enumeration_runs(
    calls: Sequence[CallSummary],
    *,
    codes: Sequence[str] = ENUMERATION_CODES,
    min_run: int = 3,
    max_step: int = 10,
) -> list[EnumerationRun]:
    """Runs of at least ``min_run`` consecutive calls ending with one of ``codes`` on neighbouring
    ids: same tool and code, masked arguments equal but for one number that changed by 1 to
    ``max_step``. ``calls`` in session order (:func:`session_calls`)."""
    runs: list[EnumerationRun] = []
    current: list[CallSummary] = []
    for call in calls:
        if call.code in codes and current and _neighbours(current[-1], call, max_step):
            current.append(call)
            continue
        if len(current) >= min_run:
            runs.append(
                EnumerationRun(tool=current[0].tool, code=current[0].code, calls=tuple(current))
            )
        current = [call] if call.code in codes else []
    if len(current) >= min_run:
        runs.append(
            EnumerationRun(tool=current[0].tool, code=current[0].code, calls=tuple(current))
        )
    return runs


def _neighbours(a: CallSummary, b: CallSummary, max_step: int) -> bool:
    if (a.tool, a.code) != (b.tool, b.code) or not a.arguments or not b.arguments:
        return False
    if _NUMBER.split(a.arguments) != _NUMBER.split(b.arguments):
        return False  # something besides a number changed
    moved = [
        abs(int(x) - int(y))
        for x, y in zip(_NUMBER.findall(a.arguments), _NUMBER.findall(b.arguments), strict=True)
        if x != y
    ]
    return len(moved) == 1 and 0 < moved[0] <= max_step


_SPAN_COLUMNS = ", ".join(
    [
        "span_id",
        "parent_span_id",
        "name",
        "start_time",
        "duration_ms",
        "status_code",
        "status_message",
        *(c.name for c in COLUMNS),
        "attributes",
        "events",
    ]
)


def _span_rows(backend: Backend, trace_id: str) -> list[dict[str, Any]]:
    """The trace's spans as rows by column name (see :attr:`Dialect.spans`), in start order."""
    d = backend.dialect
    return backend.fetch(
        f"SELECT {_SPAN_COLUMNS} FROM {d.spans} WHERE trace_id = {d.param('trace', 'string')} "
        "ORDER BY start_time, span_id",
        {"trace": trace_id},
    )


def _from_ns(ns: int | None) -> datetime | None:
    return None if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)


def _node(row: dict[str, Any], children: dict[str | None, list[dict[str, Any]]]) -> SpanNode:
    events = tuple(
        Event(
            name=e.get("name") or "",
            time=_from_ns(e.get("timeUnixNano")),
            attributes=_attributes(e.get("attributes")),
        )
        for e in row["events"] or ()
        if isinstance(e, dict)
    )
    return SpanNode(
        span_id=row["span_id"],
        parent_span_id=row["parent_span_id"],
        name=row["name"],
        start_time=row["start_time"],
        duration_ms=row["duration_ms"],
        status_code=row["status_code"],
        status_message=row["status_message"],
        stage=row["stage"],
        stage_outcome=row["stage_outcome"],
        code=row["code"],
        attributes=_span_attributes(row),
        events=events,
        children=tuple(_node(child, children) for child in children.get(row["span_id"], ())),
    )


def trace(source: Source, trace_id: str) -> TraceView | None:
    """Rebuild the trace ``trace_id``; None when no span of it is stored."""
    backend = backend_of(source)
    trace_id = trace_id.lower()
    rows = _span_rows(backend, trace_id)
    if not rows:
        return None
    children: dict[str | None, list[dict[str, Any]]] = {}
    ids = {row["span_id"] for row in rows}
    for row in rows:
        parent = row["parent_span_id"] if row["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(row)
    calls = _summaries(backend, "trace_id", [trace_id])
    approval_ids = sorted({c.approval_id for c in calls if c.approval_id})
    approvals = _summaries(backend, "approval_id", approval_ids) if approval_ids else []
    tainted = (tainting_call(backend, c) for c in calls if c.code == _TAINTED)
    held = [c for c in (*calls, *approvals) if c.provenance_source_step is not None]
    sources = (value_source_call(backend, c) for c in held[:1])
    return TraceView(
        trace_id=trace_id,
        roots=tuple(_node(row, children) for row in children.get(None, ())),
        calls=tuple(calls),
        approvals=tuple(approvals),
        tainted_by=tuple(t for t in tainted if t is not None),
        value_from=tuple(v for v in sources if v is not None),
    )


_TAINTED = "TAINTED_CONTEXT"


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
