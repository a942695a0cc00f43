"""The SQL that makes ``span_rows`` of OTLP JSON lines: one parallel statement, no Python per span.

The query walks a line the way the encoding nests it and parses each byte of JSON once into typed
values, except span bodies, which are parsed twice (the line yields them as JSON text, then
``from_json`` types them), as in DuckDB's own ``read_ndjson_objects`` + ``json_extract`` idiom:

1. ``read_ndjson_objects`` splits the file into lines, in parallel blocks.
2. ``from_json`` types the envelope: resource attributes (for ``service.name``), scope, and each
   span as JSON text.
3. Three ``unnest`` steps give one row per span; ``from_json`` types its fields, attributes as a
   list of ``{key, value}`` structs.
4. The pivot. On call spans the list of keys is computed once (a lambda) and each contract column
   is ``list_position`` into it. Stage spans, nine rows in ten, skip the lambda: a lambda over
   every span's attributes doubled the load time. Their three attributes are found by position,
   with a ``list_filter`` only for a stage span that carries more than three.
5. ``attributes`` keeps the span's whole attribute list only when something in it did not land
   in a typed column (an attribute the contract does not have, a value of another type, a
   repeated key): the count of non-NULL typed columns is compared with the list's length. For
   callgate's own spans that is never, and not storing 28 attributes a span twice is a quarter
   of the load time. ``events`` keeps the parsed list.
6. The call-only columns of a call span are packed into the one-element list ``call``
   (:data:`analytics.schema.CALL_TYPE`); the ``spans`` view unpacks them.
"""

from __future__ import annotations

from telemetry import attributes as A

from .schema import CALL_ONLY_COLUMNS, COLUMNS, Column

__all__ = ["parse_sql"]

_VALUE = (
    '{"stringValue":"VARCHAR","intValue":"VARCHAR","boolValue":"BOOLEAN",'
    '"doubleValue":"DOUBLE","arrayValue":"JSON","kvlistValue":"JSON","bytesValue":"VARCHAR"}'
)
_ATTRS = '[{"key":"VARCHAR","value":' + _VALUE + "}]"
_ENVELOPE = (
    '{"callgate_line":"BIGINT","resourceSpans":[{"resource":{"attributes":' + _ATTRS + "},"
    '"scopeSpans":[{"scope":{"name":"VARCHAR"},"spans":["JSON"]}]}]}'
)
"""``callgate_line``: the line number the tolerant path writes into each line it re-reads."""
_SPAN = (
    '{"traceId":"VARCHAR","spanId":"VARCHAR","parentSpanId":"VARCHAR","name":"VARCHAR",'
    '"kind":"INTEGER","startTimeUnixNano":"BIGINT","endTimeUnixNano":"BIGINT",'
    '"attributes":' + _ATTRS + ',"events":[{"timeUnixNano":"UBIGINT","name":"VARCHAR",'
    '"attributes":' + _ATTRS + '}],"status":{"code":"INTEGER","message":"VARCHAR"}}'
)


def _extract(value: str, column: Column) -> str:
    if column.otlp == "arrayValue":
        return (
            f"list_transform(from_json({value}.arrayValue, "
            f'\'{{"values":[{{"stringValue":"VARCHAR"}}]}}\')."values", '
            "lambda v: v.stringValue)"
        )
    if column.otlp == "intValue":  # text in the list, so an int beyond 64 bits is kept as sent
        return f"TRY_CAST({value}.intValue AS BIGINT)"
    return f"{value}.{column.otlp}"


_POSITIONS = 3
"""Stage spans carry about three attributes: they are found by position, without a lambda."""


def _column(column: Column) -> str:
    on_call = _extract(f"s.attributes[list_position(keys, '{column.attribute}')].value", column)
    if column.call_only:
        return f"CASE WHEN is_call THEN {on_call} END AS {column.name}"
    by_position = " ".join(
        f"WHEN s.attributes[{i}].key = '{column.attribute}' "
        f"THEN {_extract(f's.attributes[{i}].value', column)}"
        for i in range(1, _POSITIONS + 1)
    )
    found = f"list_filter(s.attributes, lambda a: a.key = '{column.attribute}')[1].value"
    return (
        f"CASE WHEN is_call THEN {on_call} {by_position} "
        f"WHEN len(s.attributes) > {_POSITIONS} THEN {_extract(found, column)} "
        f"END AS {column.name}"
    )


def _typed_count() -> str:
    """How many of a span's attributes landed in typed columns (on a span that is not a call,
    the call-only columns are NULL: not counted)."""

    def count(columns: list[Column]) -> str:
        return " + ".join(f"({c.name} IS NOT NULL)::INTEGER" for c in columns)

    shared = [c for c in COLUMNS if not c.call_only]
    return f"CASE WHEN category = 'call' THEN {count(list(COLUMNS))} ELSE {count(shared)} END"


_PROBLEM = """CASE
        WHEN s.traceId IS NULL OR NOT regexp_full_match(s.traceId, '[0-9a-fA-F]{32}')
            THEN 'traceId is not 32 hex digits'
        WHEN s.spanId IS NULL OR NOT regexp_full_match(s.spanId, '[0-9a-fA-F]{16}')
            THEN 'spanId is not 16 hex digits'
        WHEN s.name IS NULL THEN 'no span name'
        WHEN coalesce(s.startTimeUnixNano, 0) <= 0
            THEN 'no start time (startTimeUnixNano missing, 0, or not a 63-bit integer)'
        WHEN coalesce(s.endTimeUnixNano, 0) <= 0
            THEN 'no end time (endTimeUnixNano missing, 0, or not a 63-bit integer)'
        WHEN s.endTimeUnixNano < s.startTimeUnixNano THEN 'ends before it starts'
    END"""
"""Why the store cannot hold a span (its NOT NULL columns need ids, a name and real times), or
NULL. Values the typed columns cannot hold elsewhere in the span become NULL there and the span
keeps its attribute list, so nothing else rejects a span."""


def parse_sql(source: str, file_id: int, batch: int, *, tolerant: bool = False) -> str:
    """The SELECT that yields ``span_rows`` rows (all columns, table order) from ``source``.

    ``source`` is a table function call such as ``read_ndjson_objects('f.json')``; ``file_id`` and
    ``batch`` are stored on every row. All are trusted values built by the loader.

    A span the store cannot hold (:data:`_PROBLEM`) makes the statement fail with an
    ``InvalidInputException`` (the fast path then redoes the file tolerantly). With ``tolerant``
    it does not: three more columns follow, ``problem`` (NULL for a good span), ``line`` (the
    ``callgate_line`` of its line) and ``excerpt`` (the span's JSON, cut), so the caller can
    record bad spans in ``load_errors`` and insert the others.
    """
    columns = ",\n        ".join(_column(c) for c in COLUMNS)
    # Stored in lowercase, as every reader looks ids up (hex is hex in either case).
    trace_id = (
        "lower(s.traceId)"
        if tolerant
        else "CASE WHEN problem IS NULL THEN lower(s.traceId) "
        "ELSE error('callgate: a span the store cannot hold: ' || problem) END"
    )
    extra = ", problem, line, left(raw::VARCHAR, 200) AS excerpt" if tolerant else ""
    names = ", ".join(c.name for c in COLUMNS if not c.call_only)
    call = ", ".join(f"'{c.name}': {c.name}" for c in CALL_ONLY_COLUMNS)
    # The typed columns are computed in the inner SELECT and only counted in the outer one: a
    # lateral alias in the same SELECT is expanded in place, which evaluated every column twice.
    return f"""
SELECT
    trace_id, span_id, parent_span_id, name, category, kind, start_time, end_time, duration_ns,
    status_code, status_message, service, scope, {names},
    CASE WHEN category = 'call' THEN [{{{call}}}] END AS call,
    CASE WHEN len(all_attributes) = {_typed_count()} THEN NULL ELSE all_attributes END
        AS attributes,
    events, file_id, batch{extra}
FROM (
SELECT
    {trace_id} AS trace_id,
    s.spanId AS span_id,
    nullif(s.parentSpanId, '') AS parent_span_id,
    s.name,
    CASE WHEN is_call THEN 'call'
         WHEN s.name = '{A.SETTLED_SPAN}' THEN 'settlement'
         WHEN starts_with(s.name, '{A.STAGE_SPAN_PREFIX}') THEN 'stage'
         ELSE 'other' END AS category,
    s.kind,
    make_timestamp(s.startTimeUnixNano // 1000) AS start_time,
    make_timestamp(s.endTimeUnixNano // 1000) AS end_time,
    s.endTimeUnixNano - s.startTimeUnixNano AS duration_ns,
    coalesce(s.status.code, 0) AS status_code,
    nullif(s.status.message, '') AS status_message,
    service,
    scope,
    {columns},
    s.attributes AS all_attributes,
    s.events AS events,
    {int(file_id)} AS file_id,
    {int(batch)} AS batch,
    problem,
    line,
    raw
FROM (
    SELECT
        s,
        {_PROBLEM} AS problem,
        raw,
        line,
        CASE WHEN starts_with(s.name, '{A.CALL_SPAN_PREFIX}')
             THEN list_transform(s.attributes, lambda a: a.key) END AS keys,
        starts_with(s.name, '{A.CALL_SPAN_PREFIX}') AS is_call,
        service,
        scope
    FROM (
        SELECT from_json(raw, '{_SPAN}') AS s, raw, service, scope, line
        FROM (
        SELECT unnest(ss.spans) AS raw, service, ss.scope.name AS scope, line
        FROM (
            SELECT
                unnest(rs.scopeSpans) AS ss,
                line,
                rs.resource.attributes[
                    list_position(list_transform(rs.resource.attributes, lambda a: a.key),
                                  'service.name')
                ].value.stringValue AS service
            FROM (
                SELECT unnest(e.resourceSpans) AS rs, e.callgate_line AS line
                FROM (SELECT from_json(json, '{_ENVELOPE}') AS e FROM {source})
            )
        )
        )
    )
)
)
"""
