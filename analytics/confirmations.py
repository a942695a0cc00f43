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
    "DEFAULT_CONFIRMATION_TTL",
    "ConfirmationFunnel",
    "confirmation_funnel",
    "confirmation_funnel_query",
    "data_now",
]

DEFAULT_CONFIRMATION_TTL = timedelta(seconds=900)
"""The guard's default ``Policy.confirmation_ttl``: an approval undecided for longer has expired.

Every view that splits pending from expired (``callgate report``, the dashboard) uses this one
default and the one ``--confirmation-ttl`` option (:data:`analytics.cli.confirmation_ttl_option`).
"""


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
    """Denied by nobody in time: a resumption recorded the expiry, or none came within the TTL."""
    pending: int
    """No decision recorded yet, asked within the confirmation TTL: a human can still decide."""


def data_now(source: Source) -> datetime | None:
    """The latest call stored: the data's clock, right for a live database and for one loaded
    from old span files alike (None for an empty source)."""
    b = backend_of(source)
    latest = b.fetch(f"SELECT max(start_time) AS last FROM {b.dialect.calls}", {})
    return latest[0]["last"] if latest else None


def confirmation_funnel_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    bucket: timedelta | None = None,
    cutoff: datetime | None = None,
) -> SqlParams:
    """The funnel, step by step.

    1. ``required``: calls (filtered) carrying ``guard.approval.outcome = 'pending'`` that are not
       themselves resumptions; one per approval id.
    2. ``decided``: per approval id, the latest resumed call (``guard.resumed``): its decision
       (``approval.outcome``) and its code. Not time-filtered: a decision may come later.
    3. Left join and count each outcome; no resumed call means still pending when asked at or
       after ``cutoff`` (now - TTL), expired before it (None: every undecided one is pending).
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
    lapsed = "false"
    if cutoff is not None:
        params["cutoff"] = d.value(cutoff)
        lapsed = f"r.start_time < {d.param('cutoff', 'timestamp')}"
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
               sum(CASE WHEN x.decision = 'expired'
                         OR (coalesce(x.decision, '') = '' AND {lapsed})
                        THEN 1 ELSE 0 END) AS expired,
               sum(CASE WHEN coalesce(x.decision, '') = '' AND NOT ({lapsed})
                        THEN 1 ELSE 0 END) AS pending
        FROM required AS r
        LEFT JOIN decided AS x ON x.approval_id = r.approval_id
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )


def confirmation_funnel(
    source: Source,
    filters: Filters = ALL,
    *,
    bucket: timedelta | None = None,
    ttl: timedelta = DEFAULT_CONFIRMATION_TTL,
    now: datetime | None = None,
) -> list[ConfirmationFunnel]:
    """Confirmation outcomes per tool.

    Definition: each call that asked for a human (CONFIRMATION_REQUIRED or TAINTED_CONTEXT, with
    ``guard.approval.outcome = 'pending'``) is followed to the resumed call with the same
    ``guard.approval.id``: approved and executed (code OK), approved but refused on re-check
    (approved, another code), denied, expired, or still pending. With no resumed call, the
    approval is pending while it was asked within ``ttl`` (the deployment's
    ``Policy.confirmation_ttl``) of ``now`` (default: the latest call stored, :func:`data_now`),
    and expired after: the guard refuses to resume it. The time filter and buckets apply to the
    call that asked. Frequent denials mean the model proposes the wrong actions.
    """
    b = backend_of(source)
    now = now if now is not None else data_now(source)
    cutoff = now - ttl if now is not None else None
    rows = b.fetch(*confirmation_funnel_query(filters, b.dialect, bucket=bucket, cutoff=cutoff))
    return rows_as(ConfirmationFunnel, rows)
