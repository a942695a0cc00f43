"""From the sidebar's choices to analytics' :class:`~analytics.metrics.Filters` and a bucket size.

Relative windows ("last hour") end at the latest call in the source, not at the wall clock: on a
database that keeps filling the two are the same, and on a file from yesterday's incident the
window still shows its last hour instead of nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from analytics.metrics import FilterOptions, Filters

__all__ = ["BUCKETS", "CUSTOM", "WINDOWS", "Selection", "bucket_for", "resolve"]

WINDOWS: dict[str, timedelta | None] = {
    "All time": None,
    "Last 15 minutes": timedelta(minutes=15),
    "Last hour": timedelta(hours=1),
    "Last 6 hours": timedelta(hours=6),
    "Last 24 hours": timedelta(days=1),
    "Last 7 days": timedelta(days=7),
}
"""Relative windows, in the order the sidebar lists them; each ends at the latest call."""
CUSTOM = "Custom dates"

BUCKETS: tuple[timedelta, ...] = (
    timedelta(minutes=1),
    timedelta(minutes=5),
    timedelta(minutes=15),
    timedelta(minutes=30),
    timedelta(hours=1),
    timedelta(hours=3),
    timedelta(hours=6),
    timedelta(hours=12),
    timedelta(days=1),
    timedelta(days=7),
)
"""Trend bucket sizes, smallest first."""
_MAX_POINTS = 60


@dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """What the sidebar's filter widgets hold."""

    window: str = "All time"
    """A key of :data:`WINDOWS`, or :data:`CUSTOM`."""
    days: tuple[date, date] | None = None
    """First and last day (inclusive, UTC) when ``window`` is :data:`CUSTOM`."""
    services: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()


def resolve(selection: Selection, options: FilterOptions) -> tuple[Filters, timedelta]:
    """The analytics filters for ``selection``, and the trend bucket that fits its window."""
    start: datetime | None = None
    end: datetime | None = None
    if selection.window == CUSTOM and selection.days:
        first_day, last_day = selection.days
        start = datetime.combine(first_day, time())
        end = datetime.combine(last_day + timedelta(days=1), time())
    else:
        width = WINDOWS.get(selection.window)
        if width is not None and options.last is not None:
            start = options.last - width
    filters = Filters(
        start=start,
        end=end,
        services=selection.services,
        tools=selection.tools,
        principals=selection.principals,
    )
    lo = start or options.first
    hi = end or options.last
    return filters, bucket_for(hi - lo if lo and hi else timedelta(0))


def bucket_for(width: timedelta) -> timedelta:
    """The smallest bucket that draws ``width`` in at most 60 points."""
    for bucket in BUCKETS:
        if width / bucket <= _MAX_POINTS:
            return bucket
    return BUCKETS[-1]
