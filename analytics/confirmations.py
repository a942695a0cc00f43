"""Confirmation outcomes: what became of the calls that asked a human.

Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .dialect import DUCKDB, Dialect
from .query import (
    ALL,
    Filters,
    Source,
    SqlParams,
    backend_of,
    bucket_expr,
    rows_as,
    where_clause,
)

__all__ = [
    "ConfirmationFunnel",
    "confirmation_funnel",
    "confirmation_funnel_query",
]


# ---------------------------------------------------------------------------------------------
# Confirmation funnel


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmationFunnel:
    """What became of the calls that asked a human."""

    bucket: datetime | None
    tool: str
    required: int
    """Calls that ended CONFIRMATION_REQUIRED or TAINTED_CONTEXT with a pending approval."""
    approved_executed: int
    """Approved, and the resumed call ran (code OK)."""
    approved_refused: int
    """Approved, but the re-check refused the resumed call (any other code)."""
    denied: int
    expired: int
    pending: int
    """No decision recorded yet."""


def confirmation_funnel_query(
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """The funnel, step by step.

    1. ``required``: calls (filtered) carrying ``guard.approval.outcome = 'pending'`` that are not
       themselves resumptions; one per approval id.
    2. ``decided``: per approval id, the latest resumed call (``guard.resumed``): its decision
       (``approval.outcome``) and its code. Not time-filtered: a decision may come later.
    3. Left join and count each outcome; no resumed call means still pending.
    """
    where, params = where_clause(
        filters,
        d,
        extra=[
            "approval_outcome = 'pending'",
            "approval_id IS NOT NULL",
            "NOT coalesce(resumed, false)",
        ],
    )
    return (
        f"""
        WITH required AS (
            SELECT approval_id, min(tool) AS tool, min(start_time) AS start_time
            FROM {d.calls} {where}
            GROUP BY approval_id
        ),
        decided AS (
            SELECT approval_id,
                   {d.arg_max}(approval_outcome, start_time) AS decision,
                   {d.arg_max}(code, start_time) AS final_code
            FROM {d.calls}
            WHERE resumed AND approval_id IN (SELECT approval_id FROM required)
            GROUP BY approval_id
        )
        SELECT {bucket_expr(d, bucket, "r.start_time")} AS bucket, r.tool AS tool,
               count(*) AS required,
               sum(CASE WHEN x.decision = 'approved' AND x.final_code = 'OK'
                        THEN 1 ELSE 0 END) AS approved_executed,
               sum(CASE WHEN x.decision = 'approved' AND x.final_code <> 'OK'
                        THEN 1 ELSE 0 END) AS approved_refused,
               sum(CASE WHEN x.decision = 'denied' THEN 1 ELSE 0 END) AS denied,
               sum(CASE WHEN x.decision = 'expired' THEN 1 ELSE 0 END) AS expired,
               sum(CASE WHEN coalesce(x.decision, '') = '' THEN 1 ELSE 0 END) AS pending
        FROM required AS r
        LEFT JOIN decided AS x ON x.approval_id = r.approval_id
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )


def confirmation_funnel(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[ConfirmationFunnel]:
    """Confirmation outcomes per tool.

    Definition: each call that asked for a human (CONFIRMATION_REQUIRED or TAINTED_CONTEXT, with
    ``guard.approval.outcome = 'pending'``) is followed to the resumed call with the same
    ``guard.approval.id``: approved and executed (code OK), approved but refused on re-check
    (approved, another code), denied, expired, or still pending (no resumed call). The time
    filter and buckets apply to the call that asked. Frequent denials mean the model proposes
    the wrong actions.
    """
    b = backend_of(source)
    rows = b.fetch(*confirmation_funnel_query(filters, b.dialect, bucket=bucket))
    return rows_as(ConfirmationFunnel, rows)
