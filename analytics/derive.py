"""What the loader derives from each load, in the same transaction: ``calls`` and the latency
histogram. Both are kept from the new spans alone (plus the few stored calls they renumber),
never by rescanning or rewriting what earlier loads stored, and never by UPDATEs of rows just
inserted: a follow round costs what its new spans cost, however large the database has grown."""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb

from .dialect import DUCKDB
from .schema import CALLS_SELECT

__all__ = [
    "LATENCY_HISTOGRAM",
    "LONGEST_TABLE",
    "SESSIONS_TABLE",
    "WAITS_TABLE",
    "derive",
    "derive_calls",
    "late_stage_window",
    "parent_window",
]


def _order_key(alias: str) -> str:
    """A call's place in its session as one comparable value: the order of ``ORDER BY
    start_time, step, span_id`` (steps NULLS LAST, DuckDB's default), as a struct."""
    return (
        f"{{'t': {alias}start_time, 'n': {alias}step IS NULL, 's': coalesce({alias}step, 0), "
        f"'i': {alias}span_id}}"
    )


_SAME_SESSION = "c.session IS NOT DISTINCT FROM cut.session"
_KEY = _order_key("")

SESSIONS_TABLE = "call_sessions"
"""Per session: how many calls ``calls`` holds, when the first starts and the last call's order
key, so a round numbers its new calls without counting the session's stored ones."""

WAITS_TABLE = "call_waits"
"""Per (session, tool): no call of the pair still waiting for a next OK call (``next_ok_gap``
NULL) starts before ``since``; a round looks no further back for the calls an OK call frees."""

LONGEST_TABLE = "call_longest"
"""One row: the longest call stored (ms). A stage span's call starts at most that long before it,
so the histogram looks for the calls of a load's stage spans only that far back."""

_SIDE_TABLES: tuple[str, ...] = (
    f"""
    CREATE TABLE IF NOT EXISTS {SESSIONS_TABLE} AS
    SELECT session, count(*) AS calls, min(start_time) AS first_start, max({_KEY}) AS last
    FROM calls GROUP BY session
    """,
    f"""
    CREATE TABLE IF NOT EXISTS {WAITS_TABLE} AS
    SELECT session, tool, min(start_time) AS since FROM calls
    WHERE next_ok_gap IS NULL GROUP BY session, tool
    """,
    f"""
    CREATE TABLE IF NOT EXISTS {LONGEST_TABLE} AS
    SELECT coalesce(max(duration_ms), 0) AS ms FROM calls
    """,
)
"""Made from ``calls`` where a database from before them lacks them (once: then kept)."""

_TOUCHED: tuple[str, ...] = (
    f"CREATE OR REPLACE TEMP TABLE fresh AS {CALLS_SELECT}",
    # Per touched session: where its first new call falls, and whether it comes after every
    # stored call (the usual case: then no stored call is renumbered). A NULL session is one.
    f"""
    CREATE OR REPLACE TEMP TABLE touched AS
    SELECT f.session, f.first, coalesce(s.calls, 0) AS stored, s.first_start, s.last,
           s.last IS NULL OR f.first > s.last AS after
    FROM (SELECT session, min({_KEY}) AS first FROM fresh GROUP BY session) AS f
    LEFT JOIN {SESSIONS_TABLE} AS s ON s.session IS NOT DISTINCT FROM f.session
    """,
)

_SINCE = f"""
SELECT least(
    (SELECT min(first_start) FROM touched WHERE NOT after),
    (SELECT min(w.since) FROM {WAITS_TABLE} AS w
     SEMI JOIN fresh AS f ON f.ok AND f.session IS NOT DISTINCT FROM w.session
                          AND f.tool IS NOT DISTINCT FROM w.tool)
)
"""
"""How far back the stored calls a round can change start: a session the new calls land inside
is read from its first call; the others only from their oldest call still waiting for an OK
call to a tool that has one among the new calls."""

_REFRESH: tuple[str, ...] = (
    # How many stored calls come before the first new one (their seq stays).
    f"""
    CREATE OR REPLACE TEMP TABLE cut AS
    SELECT t.session, t.first,
           t.stored - count(c.span_id) FILTER (WHERE {_order_key("c.")} >= t.first) AS prefix
    FROM touched AS t LEFT JOIN stored AS c ON c.session IS NOT DISTINCT FROM t.session
    GROUP BY t.session, t.first, t.stored
    """,
    # The stored calls at or after that point are renumbered (none when calls arrive in order).
    f"""
    CREATE OR REPLACE TEMP TABLE moved AS
    SELECT c.*, true AS renumber, cut.prefix
    FROM stored AS c JOIN cut ON {_SAME_SESSION}
    WHERE {_order_key("c.")} >= cut.first
    """,
    # Before it, only the calls whose next OK call to the same tool may now be a new one: those
    # with none yet (or one past the point), of a tool that has an OK call past the point.
    f"""
    INSERT INTO moved
    SELECT c.*, false, cut.prefix
    FROM stored AS c JOIN cut ON {_SAME_SESSION}
    WHERE {_order_key("c.")} < cut.first
      AND (c.next_ok_gap IS NULL OR c.seq + c.next_ok_gap > cut.prefix)
      AND EXISTS (
          SELECT 1 FROM (
              SELECT session, tool FROM moved WHERE ok AND renumber
              UNION ALL SELECT session, tool FROM fresh WHERE ok
          ) AS o
          WHERE o.session IS NOT DISTINCT FROM c.session AND o.tool IS NOT DISTINCT FROM c.tool
      )
    """,
    "DELETE FROM calls WHERE rowid IN (SELECT moved_row FROM moved)",
    """
    CREATE OR REPLACE TEMP TABLE placed AS
    SELECT * EXCLUDE (prefix) REPLACE (
        min(CASE WHEN ok THEN seq END) OVER (
            PARTITION BY session, tool ORDER BY seq
            ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING
        ) - seq AS next_ok_gap
    )
    FROM (
        SELECT * REPLACE (
            CASE WHEN renumber THEN prefix + row_number() OVER (
                PARTITION BY session, renumber ORDER BY start_time, step, span_id
            ) ELSE seq END AS seq
        )
        FROM (
            SELECT * EXCLUDE (moved_row) FROM moved
            UNION ALL BY NAME
            SELECT f.*, true AS renumber, cut.prefix
            FROM fresh AS f JOIN cut ON f.session IS NOT DISTINCT FROM cut.session
        )
    )
    """,
    # In time order, so row groups hold calls of one time and a scan from a time skips the rest.
    "INSERT INTO calls BY NAME SELECT * EXCLUDE (renumber) FROM placed ORDER BY start_time",
    # The touched sessions' counts, first starts and last calls.
    f"""
    DELETE FROM {SESSIONS_TABLE} WHERE rowid IN (
        SELECT s.rowid FROM {SESSIONS_TABLE} AS s
        SEMI JOIN touched AS t ON t.session IS NOT DISTINCT FROM s.session
    )
    """,
    f"""
    INSERT INTO {SESSIONS_TABLE}
    SELECT t.session, t.stored + f.calls, least(t.first_start, f.first_start),
           greatest(t.last, f.last)
    FROM touched AS t
    JOIN (SELECT session, count(*) AS calls, min(start_time) AS first_start,
                 max({_KEY}) AS last FROM fresh GROUP BY session) AS f
      ON f.session IS NOT DISTINCT FROM t.session
    """,
    # Where each placed pair's waiting calls start. A pair with an OK call among the renumbered
    # and new ones had every waiting call placed now; the others keep their bound too.
    f"""
    CREATE OR REPLACE TEMP TABLE waits AS
    SELECT p.session, p.tool, least(
        min(p.start_time) FILTER (WHERE p.next_ok_gap IS NULL),
        CASE WHEN NOT bool_or(p.ok AND p.renumber) THEN any_value(w.since) END
    ) AS since
    FROM placed AS p
    LEFT JOIN {WAITS_TABLE} AS w
      ON w.session IS NOT DISTINCT FROM p.session AND w.tool IS NOT DISTINCT FROM p.tool
    GROUP BY p.session, p.tool
    """,
    f"""
    DELETE FROM {WAITS_TABLE} WHERE rowid IN (
        SELECT w.rowid FROM {WAITS_TABLE} AS w
        SEMI JOIN waits AS p ON p.session IS NOT DISTINCT FROM w.session
                            AND p.tool IS NOT DISTINCT FROM w.tool
    )
    """,
    f"INSERT INTO {WAITS_TABLE} SELECT * FROM waits WHERE since IS NOT NULL",
    "DROP TABLE waits",
    f"UPDATE {LONGEST_TABLE} SET ms = greatest(ms, (SELECT max(duration_ms) FROM fresh))",
    "DROP TABLE placed",
    "DROP TABLE moved",
    "DROP TABLE cut",
    "DROP TABLE stored",
    "DROP TABLE touched",
    "DROP TABLE fresh",
)
"""Move the new calls of load ``$batch`` into ``calls`` with ``seq`` and ``next_ok_gap`` as a
bulk load of everything would give them (a later OK call can recover an earlier rejection), once
``stored`` holds the stored calls of the touched sessions that can change (:func:`derive_calls`).
Only the stored calls whose numbers can change are taken out and put back: those after the
session's first new call, and those before it still waiting for an OK call to a tool that now
has one. A session that grows by a few calls a round costs a few rows a round, not the whole
session."""


_BUCKET = DUCKDB.latency_bucket("s.duration_ns")

LATENCY_HISTOGRAM: tuple[str, ...] = (
    f"""
    INSERT INTO stage_latency_hist
    SELECT date_trunc('hour', s.start_time), s.service, c.tool, s.stage, {_BUCKET}, count(*),
           $batch
    FROM span_rows AS s
    LEFT JOIN calls AS c ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
        AND c.start_time BETWEEN $calls_from AND $calls_to
    WHERE s.category = 'stage' AND s.stage IS NOT NULL AND s.batch = $batch
    GROUP BY ALL
    """,
    *(
        f"""
        INSERT INTO stage_latency_hist
        SELECT date_trunc('hour', s.start_time), s.service, {tool}, s.stage, {_BUCKET},
               {sign} count(*), $batch
        FROM span_rows AS s
        JOIN calls AS c ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
        WHERE s.category = 'stage' AND s.stage IS NOT NULL AND s.batch < $batch
          AND s.start_time BETWEEN $late_from AND $late_to
          AND c.batch = $batch
        GROUP BY ALL
        """
        for tool, sign in (("NULL", "-"), ("c.tool", ""))
    ),
    """
    INSERT INTO stage_latency_all
    SELECT hour, stage, bucket, sum(spans), $batch FROM stage_latency_hist
    WHERE batch = $batch GROUP BY hour, stage, bucket HAVING sum(spans) <> 0
    """,
)
"""Keep ``stage_latency_hist`` in step with the load: its stage spans counted under their call's
tool (NULL when the call span is not loaded yet); stage spans of earlier loads whose call span
arrives only now are moved from the NULL tool to theirs (a negative row, then a positive one).
The calls of the load's stage spans are looked for only where they can start
(``$calls_from``, ``$calls_to``: :func:`parent_window`). Then the load's rows summed over services and tools into ``stage_latency_all`` (the moves cancel
out there). Earlier stage spans are looked for only where a new call's stages can start: between
its start and its end (``$late_from``, ``$late_to``: :func:`late_stage_window`), so the scan reads
the row groups of that time and skips the rest by their min/max."""


def late_stage_window(con: duckdb.DuckDBPyConnection, batch: int) -> tuple[datetime, datetime]:
    """From the first start to the last end of load ``batch``'s calls: where the stage spans of
    those calls start (a stage runs inside its call). Empty (end before start) without calls."""
    row = con.execute(
        "SELECT min(start_time), max(start_time + to_microseconds(CAST(duration_ms * 1000 AS "
        "BIGINT))) FROM calls WHERE batch = $batch",
        {"batch": batch},
    ).fetchall()[0]
    if row[0] is None:
        return datetime(2000, 1, 2), datetime(2000, 1, 1)
    return row[0], row[1]


_SLACK = timedelta(seconds=1)
"""Room for a stage stamped a little outside its call (clocks of different hosts)."""


def parent_window(con: duckdb.DuckDBPyConnection, batch: int) -> tuple[datetime, datetime]:
    """Where the calls of load ``batch``'s stage spans start: from the longest call stored
    before its first stage span to its last (a stage runs inside its call), with
    :data:`_SLACK` either side. Empty (end before start) without stage spans."""
    first, last = con.execute(
        "SELECT min(start_time), max(start_time) FROM span_rows "
        "WHERE batch = $batch AND category = 'stage'",
        {"batch": batch},
    ).fetchall()[0]
    if first is None:
        return datetime(2000, 1, 2), datetime(2000, 1, 1)
    longest = con.execute(f"SELECT max(ms) FROM {LONGEST_TABLE}").fetchall()[0][0] or 0.0
    return first - timedelta(milliseconds=longest) - _SLACK, last + _SLACK


def derive_calls(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Bring ``calls`` up to date with load ``batch`` (:data:`_REFRESH`), reading of the stored
    calls only those of the touched sessions that start late enough to change (:data:`_SINCE`):
    the bound is a literal, so the scan skips the row groups of earlier calls by their min/max,
    and a round reads rows in proportion to its new calls, not to the calls stored."""
    for statement in _SIDE_TABLES:
        con.execute(statement)
    for statement in _TOUCHED:
        con.execute(statement, {"batch": batch} if "$batch" in statement else None)
    since = con.execute(_SINCE).fetchall()[0][0]
    reach = "false" if since is None else f"c.start_time >= {_sql_timestamp(since)}"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stored AS
        SELECT c.rowid AS moved_row, c.* FROM calls AS c
        WHERE {reach}
          AND EXISTS (SELECT 1 FROM touched AS t WHERE t.session IS NOT DISTINCT FROM c.session)
        """
    )
    for statement in _REFRESH:
        con.execute(statement)


def _sql_timestamp(value: datetime) -> str:
    return f"TIMESTAMP '{value.isoformat(sep=' ')}'"


def derive(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Bring the derived data up to date with load ``batch``: ``calls``, then the latency
    histogram (which needs the calls)."""
    derive_calls(con, batch)
    late_from, late_to = late_stage_window(con, batch)
    calls_from, calls_to = parent_window(con, batch)
    window = {
        "batch": batch,
        "late_from": late_from,
        "late_to": late_to,
        "calls_from": calls_from,
        "calls_to": calls_to,
    }
    for statement in LATENCY_HISTOGRAM:
        con.execute(statement, {k: v for k, v in window.items() if f"${k}" in statement})
