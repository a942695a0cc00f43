"""The DuckDB schema: ``span_rows`` and its ``spans`` view, bookkeeping, ``calls``, ``stages``.

Every attribute of the span contract (``telemetry.attributes``) gets a typed column, named in
:data:`COLUMNS`; metrics group and filter on those columns only (a group-by over a MAP column is
6-7x slower). Nothing is lost: a span that carries anything the typed columns do not hold (an
attribute the contract does not have yet, a value of another type) keeps its whole attribute list,
as sent, in ``attributes`` (the OTLP list of ``{key, value}``; ``attribute(attributes, key)`` reads
one as text). For spans that fit the contract ``attributes`` is NULL: storing every attribute a
second time was a quarter of the load time.

The loader writes ``span_rows``, where a call span's call-only columns are packed in one list
column (``call``, see :data:`CALL_TYPE`); readers query the ``spans`` view, one column each.
"""

from __future__ import annotations

from dataclasses import dataclass

from telemetry import attributes as A

__all__ = [
    "ATTRIBUTES_TYPE",
    "ATTRIBUTE_MACRO",
    "CALLS_SELECT",
    "CALLS_TABLE",
    "CALL_ONLY_COLUMNS",
    "CALL_TYPE",
    "COLUMNS",
    "CONTRACT_TABLES",
    "DDL",
    "LATENCY_SUBBUCKETS",
    "LOAD_ERRORS_TABLE",
    "LOAD_STATE_TABLE",
    "META_TABLE",
    "SCHEMA_VERSION",
    "SPANS_VIEW",
    "SPAN_COLUMNS",
    "SPAN_ROWS_TABLE",
    "STAGES_VIEW",
    "STAGE_LATENCY_ALL_TABLE",
    "STAGE_LATENCY_TABLE",
    "VALUE_TYPE",
    "Column",
    "column_name",
]

SCHEMA_VERSION = 4
"""Bumped when a table changes shape; stored in ``meta`` so an old database is recognised (4: the
approval-reason, provenance, approval timing and injection-excerpt columns of issues 20 and 22)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """A typed column holding one contract attribute."""

    attribute: str
    """The span attribute, e.g. ``guard.code``."""
    name: str
    """The column in ``spans``."""
    sql_type: str
    """DuckDB type: VARCHAR, BOOLEAN, BIGINT, DOUBLE or VARCHAR[]."""
    otlp: str
    """Which OTLP ``AnyValue`` field carries it: stringValue, boolValue, intValue, doubleValue,
    arrayValue."""
    call_only: bool
    """Only call spans carry it (the loader skips the lookup on stage spans)."""


_SQL_TYPES = {
    "string": ("VARCHAR", "stringValue"),
    "bool": ("BOOLEAN", "boolValue"),
    "int": ("BIGINT", "intValue"),
    "double": ("DOUBLE", "doubleValue"),
    "string[]": ("VARCHAR[]", "arrayValue"),
}

_NAMES = {
    "gen_ai.operation.name": "operation",
    "gen_ai.tool.name": "tool",
    "gen_ai.tool.call.id": "call_id",
    "gen_ai.tool.type": "tool_type",
    "gen_ai.conversation.id": "session",
    "gen_ai.tool.call.arguments": "call_arguments",
    "gen_ai.tool.call.result": "call_result",
    "guard.approval.by": "approved_by",
    "guard.idempotency_key": "idempotency_key",
    "guard.stage.name": "stage",
    "guard.tool.schema_hash": "schema_hash",
}
"""Column names that are not simply the attribute without its namespace, dots as underscores."""


def column_name(attribute: str) -> str:
    """The ``spans`` column of a contract attribute: ``guard.approval.id`` -> ``approval_id``."""
    if attribute in _NAMES:
        return _NAMES[attribute]
    for namespace in ("guard.", "gen_ai."):
        attribute = attribute.removeprefix(namespace)
    return attribute.replace(".", "_")


def _columns() -> tuple[Column, ...]:
    stage_attributes = {a.name for a in A.STAGE_ATTRIBUTES}
    seen: dict[str, Column] = {}
    for attribute in (*A.CALL_ATTRIBUTES, *A.STAGE_ATTRIBUTES):
        if attribute.name in seen:
            continue  # guard.code is on both kinds of span: one column
        sql_type, otlp = _SQL_TYPES[attribute.type]
        seen[attribute.name] = Column(
            attribute=attribute.name,
            name=column_name(attribute.name),
            sql_type=sql_type,
            otlp=otlp,
            call_only=attribute.name not in stage_attributes,
        )
    return tuple(seen.values())


COLUMNS: tuple[Column, ...] = _columns()
"""One typed column per contract attribute, in contract order."""

VALUE_TYPE = (
    "STRUCT(stringValue VARCHAR, intValue VARCHAR, boolValue BOOLEAN, doubleValue DOUBLE, "
    "arrayValue JSON, kvlistValue JSON, bytesValue VARCHAR)"
)
"""An OTLP ``AnyValue`` as the loader parses it (arrays and key-value lists stay JSON text; an
``intValue`` stays text as OTLP JSON sends it, so one beyond 64 bits is kept, not lost)."""
ATTRIBUTES_TYPE = f"STRUCT(key VARCHAR, value {VALUE_TYPE})[]"
"""Every attribute of a span, exactly as sent: a list of ``{key, value}``."""

_ROW_COLUMNS = [c for c in COLUMNS if not c.call_only]
"""The typed columns every span has a place for in ``span_rows`` (the stage spans' ones)."""
CALL_ONLY_COLUMNS: tuple[Column, ...] = tuple(c for c in COLUMNS if c.call_only)
"""The typed columns only call spans carry: packed into ``span_rows.call``."""

CALL_TYPE = "STRUCT(" + ", ".join(f"{c.name} {c.sql_type}" for c in CALL_ONLY_COLUMNS) + ")[]"
"""``span_rows.call``: a one-element list holding a call span's call-only typed columns, NULL on
other spans. A list, not a struct or one column each: DuckDB writes a struct's fields (and every
column) for every row, NULL or not, about 25 ms per column per million rows, which was a third
of the load time; a list's elements are written only for the rows that have one."""

_SPAN_HEAD = """
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    parent_span_id VARCHAR,
    name VARCHAR NOT NULL,
    category VARCHAR NOT NULL,      -- call, stage, settlement (guard.outcome.settled), other
    kind INTEGER,                   -- OTLP SpanKind number
    start_time TIMESTAMP NOT NULL,  -- UTC, microseconds
    end_time TIMESTAMP NOT NULL,
    duration_ns BIGINT NOT NULL,
    status_code INTEGER NOT NULL,   -- 0 unset, 1 ok, 2 error
    status_message VARCHAR,
    service VARCHAR,                -- resource attribute service.name
    scope VARCHAR,"""
_SPAN_TAIL = ("attributes", "events", "file_id", "batch")

SPAN_ROWS_TABLE = f"""
CREATE TABLE IF NOT EXISTS span_rows ({_SPAN_HEAD}
    {", ".join(f"{c.name} {c.sql_type}" for c in _ROW_COLUMNS)},
    call {CALL_TYPE},  -- call spans: [{{tool, session, ...}}]; read them through ``spans``
    attributes {ATTRIBUTES_TYPE},  -- all attributes, as sent, when some did not fit the columns
    events STRUCT(timeUnixNano UBIGINT, name VARCHAR, attributes {ATTRIBUTES_TYPE})[],
    file_id BIGINT,                 -- load_state.file_id of the file the span came from
    batch BIGINT                    -- which load inserted it (meta 'batch' counts them)
)
"""
"""One row per span, as the loader stores it. Read ``spans``, which unpacks ``call``."""

_HEAD_NAMES = [line.split()[0] for line in _SPAN_HEAD.strip().splitlines()]
SPAN_COLUMNS: tuple[str, ...] = (*_HEAD_NAMES, *(c.name for c in COLUMNS), *_SPAN_TAIL)
"""The columns of ``spans``, in order."""

SPANS_VIEW = f"""
CREATE OR REPLACE VIEW spans AS
SELECT {", ".join(_HEAD_NAMES)},
    {", ".join(c.name if not c.call_only else f"call[1].{c.name} AS {c.name}" for c in COLUMNS)},
    {", ".join(_SPAN_TAIL)}
FROM span_rows
"""
"""One row per span with a typed column per contract attribute (NULL where the span does not
carry it), everything else in ``attributes``: what readers query. The call-only columns come out
of ``span_rows.call``; filters on the other columns reach the table."""

LOAD_STATE_TABLE = """
CREATE TABLE IF NOT EXISTS load_state (
    file_id BIGINT PRIMARY KEY,
    fingerprint VARCHAR NOT NULL UNIQUE, -- sha256 of the first line: survives rename and gzip
    path VARCHAR NOT NULL,               -- where it was last seen
    compressed BOOLEAN NOT NULL,
    "offset" BIGINT NOT NULL,            -- bytes (uncompressed) consumed: complete lines only
    lines BIGINT,                        -- lines consumed (NULL: not counted yet; load_errors
                                         -- counts them when it needs a line number)
    spans BIGINT NOT NULL,               -- spans inserted from this file
    loaded_at TIMESTAMP NOT NULL
)
"""
"""The manifest: one row per file ever loaded, and how far it was read."""

LOAD_ERRORS_TABLE = """
CREATE TABLE IF NOT EXISTS load_errors (
    path VARCHAR NOT NULL,
    line BIGINT NOT NULL,   -- 1-based line number in the (uncompressed) file
    reason VARCHAR NOT NULL,
    excerpt VARCHAR,        -- the first 200 characters of the line
    loaded_at TIMESTAMP NOT NULL
)
"""
"""Lines that were skipped, and why."""

META_TABLE = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL)
"""

_ON_CALLS = frozenset(a.name for a in A.CALL_ATTRIBUTES)
_CALL_COLUMNS = [c for c in COLUMNS if c.attribute in _ON_CALLS and c.name != "code"]
"""The call span's columns (``guard.fixable`` is on rejecting stage spans too: not ``call_only``)."""

CALLS_TABLE = f"""
CREATE TABLE IF NOT EXISTS calls (
    trace_id VARCHAR NOT NULL,
    span_id VARCHAR NOT NULL,
    service VARCHAR,
    start_time TIMESTAMP NOT NULL,
    duration_ms DOUBLE NOT NULL,
    status_code INTEGER NOT NULL,
    code VARCHAR,
    {", ".join(f"{c.name} {c.sql_type}" for c in _CALL_COLUMNS)},
    seq BIGINT,          -- position of the call in its session (1, 2, ...), by step then time
    next_ok_gap BIGINT,  -- calls until the next OK call to the same tool in the session; NULL: none
    batch BIGINT
)
"""
"""One row per tool call: the ``execute_tool {tool}`` spans' columns, kept apart from ``spans`` so
call metrics scan a tenth of the rows. ``seq`` and ``next_ok_gap`` are maintained by the loader
for the recovery metric (recomputed for every session a load touches)."""

CALLS_SELECT = f"""
SELECT trace_id, span_id, service, start_time, duration_ns / 1e6 AS duration_ms, status_code,
       code, {", ".join(c.name for c in _CALL_COLUMNS)}, NULL AS seq, NULL AS next_ok_gap, batch
FROM spans
WHERE category = 'call' AND batch = $batch
"""
"""The new call rows of load ``$batch``, in ``calls`` column order."""

STAGES_VIEW = """
CREATE OR REPLACE VIEW stages AS
SELECT
    s.trace_id, s.span_id, s.parent_span_id, s.service, s.start_time,
    s.duration_ns / 1e6 AS duration_ms, s.duration_ns,
    s.stage, s.stage_outcome, s.code,
    c.tool, c.session, c.principal, c.call_id
FROM span_rows AS s
LEFT JOIN calls AS c ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
WHERE s.category = 'stage'
"""
"""One row per stage span, with the tool, session, principal and call id of its call (NULL while
the call span is not loaded). Stage latency reads ``stage_latency_hist`` instead when it can."""

LATENCY_SUBBUCKETS = 16
"""Stage latency histogram resolution: 16 buckets per power of two (3-6% wide), as an
OpenTelemetry exponential histogram at scale 4. 64 made the table as long as the stage spans."""

STAGE_LATENCY_TABLE = """
CREATE TABLE IF NOT EXISTS stage_latency_hist (
    hour TIMESTAMP NOT NULL,  -- the stage span's start, truncated to the hour
    service VARCHAR,
    tool VARCHAR,             -- the call's tool (NULL while the call span is not loaded)
    stage VARCHAR NOT NULL,
    bucket BIGINT NOT NULL,   -- log-linear bucket of duration_ns: see analytics.metrics
    spans BIGINT NOT NULL,    -- may be negative: a correction when a late call span arrives
    batch BIGINT
)
"""
"""A histogram of stage durations per hour, service, tool and stage, maintained by the loader, so
stage latency percentiles read thousands of rows instead of every stage span."""

STAGE_LATENCY_ALL_TABLE = """
CREATE TABLE IF NOT EXISTS stage_latency_all (
    hour TIMESTAMP NOT NULL,
    stage VARCHAR NOT NULL,
    bucket BIGINT NOT NULL,
    spans BIGINT NOT NULL,
    batch BIGINT
)
"""
"""``stage_latency_hist`` summed over services and tools: what an unfiltered stage latency query
reads (a sixth of the rows at 10M spans)."""

ATTRIBUTE_MACRO = """
CREATE OR REPLACE MACRO attribute(attrs, name) AS (
    SELECT coalesce(v.stringValue, v.intValue::VARCHAR, v.boolValue::VARCHAR,
                    v.doubleValue::VARCHAR, v.arrayValue::VARCHAR, v.kvlistValue::VARCHAR,
                    v.bytesValue)
    FROM (SELECT list_filter(attrs, lambda a: a.key = name)[1].value AS v)
)
"""
"""``attribute(attributes, 'guard.code')``: any attribute of a span as text, for ad-hoc SQL."""

CONTRACT_TABLES: tuple[str, ...] = (
    "spans",
    "span_rows",
    "calls",
    "stage_latency_hist",
    "stage_latency_all",
    "load_state",
    "load_errors",
    "meta",
)
"""The tables a callgate database holds."""

DDL: tuple[str, ...] = (
    SPAN_ROWS_TABLE,
    SPANS_VIEW,
    LOAD_STATE_TABLE,
    LOAD_ERRORS_TABLE,
    META_TABLE,
    CALLS_TABLE,
    STAGES_VIEW,
    STAGE_LATENCY_TABLE,
    STAGE_LATENCY_ALL_TABLE,
    ATTRIBUTE_MACRO,
)
"""Everything :func:`analytics.load.connect` runs on a new database, in order."""
