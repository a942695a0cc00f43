"""How numbers read on the pages: one place, so the tests parse what people see."""

from __future__ import annotations

from datetime import datetime, timedelta

from analytics.units import duration_ms

__all__ = ["NO_RATE", "count", "duration", "ms", "rate", "time_unit", "when"]

NO_RATE = "—"
"""Shown for a rate whose denominator is zero or below the minimum-calls floor."""


def count(value: int) -> str:
    """``1234567`` -> ``1,234,567``."""
    return f"{value:,}"


def rate(value: float | None) -> str:
    """``0.3642`` -> ``36.4%``; None -> an em dash."""
    return NO_RATE if value is None else f"{value:.1%}"


def ms(value: float) -> str:
    """A duration given in ms, in the unit that fits (``852 µs``, ``42.6 ms``, ``1.23 s``): the
    same words as ``callgate report`` (:func:`analytics.units.duration_ms`)."""
    return duration_ms(value)


def time_unit(values_ms: list[float]) -> tuple[str, float]:
    """The unit a chart of these durations (in ms) reads best in, and the factor from ms.

    µs when the largest is under 1 ms, s from 10 s, ms otherwise: axis labels stay plain numbers.
    """
    top = max(values_ms, default=0.0)
    if top < 1:
        return "µs", 1000.0
    if top >= 10_000:
        return "s", 0.001
    return "ms", 1.0


def when(value: datetime | None) -> str:
    """A UTC timestamp to the second."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else NO_RATE


def duration(value: timedelta) -> str:
    """A bucket size in words: ``5 minutes``, ``1 hour``, ``7 days``."""
    seconds = int(value.total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"
