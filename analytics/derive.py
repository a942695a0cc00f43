"""What the loader derives from each load, in the same transaction: ``calls`` and the latency
histogram. Both are kept from the new spans alone (plus the sessions and calls they touch), never
by rescanning the whole table, and never by UPDATEs of rows just inserted."""

from __future__ import annotations

import duckdb

from .dialect import DUCKDB
from .schema import CALLS_SELECT

__all__ = ["LATENCY_HISTOGRAM", "REFRESH_CALLS", "derive"]

_TOUCHED = "SELECT DISTINCT session FROM spans WHERE batch = $batch AND category = 'call'"

REFRESH_CALLS: tuple[str, ...] = (
    f"CREATE OR REPLACE TEMP TABLE moved AS SELECT * FROM calls WHERE session IN ({_TOUCHED})",
    f"DELETE FROM calls WHERE session IN ({_TOUCHED})",
    f"""
    INSERT INTO calls
    SELECT * REPLACE (
        min(CASE WHEN ok THEN seq END) OVER (
            PARTITION BY session, tool ORDER BY seq
            ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING
        ) - seq AS next_ok_gap
    )
    FROM (
        SELECT * REPLACE (
            row_number() OVER (PARTITION BY session ORDER BY start_time, step, span_id) AS seq
        )
        FROM (SELECT * FROM moved UNION ALL {CALLS_SELECT})
    )
    """,
    "DROP TABLE moved",
)
"""Move the new calls of load ``$batch`` into ``calls``, renumbering every session they touch:
the sessions' earlier calls are taken out and put back with ``seq`` and ``next_ok_gap``
recomputed over old and new calls together (a later OK call can recover an earlier rejection)."""


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
out there)."""


def derive(con: duckdb.DuckDBPyConnection, batch: int) -> None:
    """Bring the derived data up to date with load ``batch``: ``calls``, then the latency
    histogram (which needs the calls)."""
    for statement in (*REFRESH_CALLS, *LATENCY_HISTOGRAM):
        con.execute(statement, {"batch": batch} if "$batch" in statement else None)
