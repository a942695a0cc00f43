"""What the loader derives from each load, in the same transaction: ``calls`` and the latency
histogram. Both are kept from the new spans alone (plus the few stored calls they renumber),
never by rescanning or rewriting what earlier loads stored, and never by UPDATEs of rows just
inserted: a follow round costs what its new spans cost, however large the database has grown."""

from __future__ import annotations

from datetime import datetime

import duckdb

from .dialect import DUCKDB
from .schema import CALLS_SELECT

__all__ = ["LATENCY_HISTOGRAM", "REFRESH_CALLS", "derive", "derive_calls", "late_stage_window"]


def _order_key(alias: str) -> str:
    """A call's place in its session as one comparable value: the order of ``ORDER BY
    start_time, step, span_id`` (steps NULLS LAST, DuckDB's default), as a struct."""
    return (
        f"{{'t': {alias}start_time, 'n': {alias}step IS NULL, 's': coalesce({alias}step, 0), "
        f"'i': {alias}span_id}}"
    )


_SAME_SESSION = "c.session IS NOT DISTINCT FROM cut.session"

REFRESH_CALLS: tuple[str, ...] = (
    f"CREATE OR REPLACE TEMP TABLE fresh AS {CALLS_SELECT}",
    # Per touched session: where its first new call falls, and how many stored calls come
    # before it (their seq stays). A NULL session is one session, as in the bulk numbering.
    f"""
    CREATE OR REPLACE TEMP TABLE cut AS
    SELECT f.session, f.first,
           count(c.span_id) FILTER (WHERE {_order_key("c.")} < f.first) AS prefix
    FROM (SELECT session, min({_order_key("")}) AS first FROM fresh GROUP BY session) AS f
    LEFT JOIN calls AS c ON c.session IS NOT DISTINCT FROM f.session
    GROUP BY f.session, f.first
    """,
    # The stored calls at or after that point are renumbered (none when calls arrive in order).
    f"""
    CREATE OR REPLACE TEMP TABLE moved AS
    SELECT c.rowid AS moved_row, c.*, true AS renumber, cut.prefix
    FROM calls AS c JOIN cut ON {_SAME_SESSION}
    WHERE {_order_key("c.")} >= cut.first
    """,
    # Before it, only the calls whose next OK call to the same tool may now be a new one: those
    # with none yet (or one past the point), of a tool that has an OK call past the point.
    f"""
    INSERT INTO moved
    SELECT c.rowid, c.*, false, cut.prefix
    FROM calls AS c JOIN cut ON {_SAME_SESSION}
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
    INSERT INTO calls BY NAME
    SELECT * EXCLUDE (renumber, prefix) REPLACE (
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
    "DROP TABLE moved",
    "DROP TABLE cut",
    "DROP TABLE fresh",
)
"""Move the new calls of load ``$batch`` into ``calls`` with ``seq`` and ``next_ok_gap`` as a
bulk load of everything would give them (a later OK call can recover an earlier rejection). Only
the stored calls whose numbers can change are taken out and put back: those after the session's
first new call, and those before it still waiting for an OK call to a tool that now has one. A
session that grows by a few calls a round costs a few rows a round, not the whole session."""


_BUCKET = DUCKDB.latency_bucket("s.duration_ns")

LATENCY_HISTOGRAM: tuple[str, ...] = (
    f"""
    INSERT INTO stage_latency_hist
    SELECT date_trunc('hour', s.start_time), s.service, c.tool, s.stage, {_BUCKET}, count(*),
           $batch
    FROM span_rows AS s
    LEFT JOIN calls AS c ON c.trace_id = s.trace_id AND c.span_id = s.parent_span_id
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
Then the load's rows summed over services and tools into ``stage_latency_all`` (the moves cancel
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


def derive_calls(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Bring ``calls`` up to date with load ``batch`` (:data:`REFRESH_CALLS`)."""
    for statement in REFRESH_CALLS:
        con.execute(statement, {"batch": batch} if "$batch" in statement else None)


def derive(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Bring the derived data up to date with load ``batch``: ``calls``, then the latency
    histogram (which needs the calls)."""
    derive_calls(con, batch)
    late_from, late_to = late_stage_window(con, batch)
    window = {"batch": batch, "late_from": late_from, "late_to": late_to}
    for statement in LATENCY_HISTOGRAM:
        con.execute(statement, {k: v for k, v in window.items() if f"${k}" in statement})
