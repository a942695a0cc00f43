"""Shadow mode: what the gate would have refused, counted apart from what it enforced.

A guard in shadow mode (``Guard(shadow=...)``) runs every stage, records the first decision that
would have stopped a call, and runs the call anyway. Its call span says ``guard.shadow = true``;
``guard.code`` (and ``guard.shadow.code``) is the code the gate would have answered with, while
``guard.ok`` and ``error.type`` say what happened. Definitions (also in docs/metrics.md):

- **would have rejected**: shadow calls with a code other than ``OK``, per tool and code.
- **shadow calls**: every call span with ``guard.shadow`` true, per tool: the denominator.
- the rate is would-have-rejected / shadow calls of the tool.

Enforced metrics never count a shadow call as a rejection: :data:`ENFORCED_CODE_SQL` is the code
the model actually got, which the by-code rejection rates group by.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .dialect import DUCKDB, Dialect
from .query import ALL, Filters, Source, SqlParams, backend_of, bucket_expr, rows_as, where_clause

__all__ = [
    "ENFORCED_CODE_SQL",
    "WouldHaveRejected",
    "would_have_rejected",
    "would_have_rejected_query",
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
    filters: Filters, d: Dialect = DUCKDB, *, bucket: timedelta | None = None
) -> SqlParams:
    """Group the shadow calls by (bucket, tool, code, stage, fixable); the denominator is a window
    over the tool's groups; rows whose code is OK (nothing would have stopped them) are dropped
    after the window counted them."""
    where, params = where_clause(filters, d, extra=["coalesce(shadow, false)"])
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
        WHERE code <> 'OK'
        ORDER BY bucket, would_have_rejected DESC, tool, code
        """,
        params,
    )


def would_have_rejected(
    source: Source, filters: Filters = ALL, *, bucket: timedelta | None = None
) -> list[WouldHaveRejected]:
    """What shadow mode would have refused, per tool and code, most frequent first."""
    b = backend_of(source)
    rows = b.fetch(*would_have_rejected_query(filters, b.dialect, bucket=bucket))
    for row in rows:
        row["would_have_rejected"] = int(row["would_have_rejected"])
        row["shadow_calls"] = int(row["shadow_calls"])
        row["fixable"] = bool(row["fixable"])
    return rows_as(WouldHaveRejected, rows)
