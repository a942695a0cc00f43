"""How numbers read on the pages: one place, so the tests parse what people see."""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = ["NO_RATE", "count", "duration", "ms", "rate", "when"]

NO_RATE = "—"
"""Shown for a rate whose denominator is zero or below the minimum-calls floor."""


def count(value: int) -> str:
    """``1234567`` -> ``1,234,567``."""
    return f"{value:,}"


def rate(value: float | None) -> str:
    """``0.3642`` -> ``36.4%``; None -> an em dash."""
    return NO_RATE if value is None else f"{value:.1%}"


def ms(value: float) -> str:
    """Milliseconds with three significant digits: ``0.208 ms``, ``42.6 ms``, ``1,234 ms``."""
    if value >= 1000:
        return f"{value:,.0f} ms"
    return f"{value:.3g} ms"


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
