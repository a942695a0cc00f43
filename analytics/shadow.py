"""Shadow mode: what the gate would have refused, counted apart from what it enforced.

A guard in shadow mode (``Guard(shadow=...)``) runs every stage, records the first decision that
would have stopped a call, and runs the call anyway. Its call span says ``guard.shadow = true``;
``guard.code`` (and ``guard.shadow.code``) is the code the gate would have answered with, while
``guard.ok`` and ``error.type`` say what happened. Definitions (also in docs/metrics.md):

- **would have rejected**: shadow calls with a code other than ``OK``, per tool and code.
- **shadow calls**: every call span with ``guard.shadow`` true, per tool: the denominator.
- the rate is would-have-rejected / shadow calls of the tool.

A call that would only have **waited for a human** (``CONFIRMATION_REQUIRED``,
``TAINTED_CONTEXT``, ``UNTRUSTED_VALUE``: the codes of :data:`analytics.gates.GATE_REASONS`) is not a
refusal: :func:`would_have_rejected` leaves it out and :func:`would_have_waited` counts it, with
the same columns, so "what enforcement would refuse" and "what it would cost in approvals" are
read apart.

Enforced metrics never count a shadow call as a rejection: :data:`ENFORCED_CODE_SQL` is the code
the model actually got, which the by-code rejection rates group by.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .dialect import DUCKDB, Dialect
from .gates import GATE_REASONS
from .query import ALL, Filters, Source, SqlParams, backend_of, bucket_expr, rows_as, where_clause

__all__ = [
    "ENFORCED_CODE_SQL",
    "WouldHaveRejected",
    "would_have_rejected",
    "would_have_rejected_query",
    "would_have_waited",
]

ENFORCED_CODE_SQL = (
    "CASE WHEN coalesce(shadow, false) THEN coalesce(error_type, 'OK') ELSE code END"
)
"""The code the model got: for a shadow call, what happened (``error.type``, or ``OK``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WouldHaveRejected:
    """Calls the gate watched in shadow mode and would have refused with ``code``."""

    bucket: datetime | None
    tool: str
    code: str
    """The code the gate would have answered with."""
    stage: str | None
    """The stage that would have refused (``guard.rejected_stage``)."""
    fixable: bool
    """Whether the model could have fixed it (``guard.fixable``)."""
    would_have_rejected: int
    shadow_calls: int
    """The denominator: shadow calls of the tool in the bucket."""

    @property
    def rate(self) -> float | None:
        """would_have_rejected / shadow_calls."""
        return self.would_have_rejected / self.shadow_calls if self.shadow_calls else None


def would_have_rejected_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    bucket: timedelta | None = None,
    waits: bool = False,
) -> SqlParams:
    """Group the shadow calls by (bucket, tool, code, stage, fixable); the denominator is a window
    over the tool's groups; rows whose code is OK (nothing would have stopped them) are dropped
    after the window counted them, and so are the human-gate codes (``waits=False``) or every
    other code (``waits=True``)."""
    where, params = where_clause(filters, d, extra=["coalesce(shadow, false)"])
    gates = ", ".join(f"'{code}'" for code in GATE_REASONS)
    kept = f"code IN ({gates})" if waits else f"code NOT IN ({gates})"
    b = bucket_expr(d, bucket)
    return (
        f"""
        SELECT bucket, tool, code, stage, fixable, would_have_rejected, shadow_calls FROM (
            SELECT {b} AS bucket, tool, code, rejected_stage AS stage,
                   coalesce(fixable, false) AS fixable, count(*) AS would_have_rejected,
                   sum(count(*)) OVER (PARTITION BY {b}, tool) AS shadow_calls
            FROM {d.calls} {where}
            GROUP BY 1, 2, 3, 4, 5
        ) AS grouped
        WHERE code <> 'OK' AND {kept}
        ORDER BY bucket, would_have_rejected DESC, tool, code
        """,
        params,
    )


def would_have_rejected(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[WouldHaveRejected]:
    """What shadow mode would have refused, per tool and code, most frequent first (calls that
    would only have waited for a human are :func:`would_have_waited`'s)."""
    return _shadow_rows(source, filters, bucket, waits=False)


def would_have_waited(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[WouldHaveRejected]:
    """Shadow calls that would only have waited for a human, per tool and code (its
    ``would_have_rejected`` counts them): the approvals enforcement would cost."""
    return _shadow_rows(source, filters, bucket, waits=True)


def _shadow_rows(
    source: Source, filters: Filters, bucket: timedelta | None, *, waits: bool
) -> list[WouldHaveRejected]:
    b = backend_of(source)
    rows = b.fetch(*would_have_rejected_query(filters, b.dialect, bucket=bucket, waits=waits))
    for row in rows:
        row["would_have_rejected"] = int(row["would_have_rejected"])
        row["shadow_calls"] = int(row["shadow_calls"])
        row["fixable"] = bool(row["fixable"])
    return rows_as(WouldHaveRejected, rows)
