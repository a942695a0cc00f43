"""How numbers read on the pages: one place, so the tests parse what people see."""

from __future__ import annotations

from datetime import datetime, timedelta

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
    """A duration given in ms, in the unit that fits, three significant digits, no e-notation.

    ``852 µs`` (never ``0.000852 ms``), ``0.85 µs``, ``42.6 ms``, ``1.23 s``, ``1,234 s``.
    """
    if value < 1:
        return f"{_sig(value * 1000)} µs"
    if value < 1000:
        return f"{_sig(value)} ms"
    if value < 1_000_000:
        return f"{_sig(value / 1000)} s"
    return f"{value / 1000:,.0f} s"


def _sig(value: float) -> str:
    """Three significant digits in plain decimal notation: 852, 42.6, 8.52, 0.085."""
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


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
