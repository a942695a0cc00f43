"""Durations as people read them: the unit that fits, three significant digits, no e-notation.

One place for ``callgate report`` and the dashboard, so both say ``852 µs`` where a column of
milliseconds would say ``0.000852``.
"""

from __future__ import annotations

__all__ = ["attribute_text", "duration_ms", "significant"]


def duration_ms(value: float) -> str:
    """A duration given in ms: ``852 µs`` (never ``0.000852 ms``), ``0.85 µs``, ``42.6 ms``,
    ``1.23 s``, ``1,234 s``."""
    if value < 1:
        return f"{significant(value * 1000)} µs"
    if value < 1000:
        return f"{significant(value)} ms"
    if value < 1_000_000:
        return f"{significant(value / 1000)} s"
    return f"{value / 1000:,.0f} s"


def significant(value: float) -> str:
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


def attribute_text(key: str, value: object) -> str:
    """A span or event attribute as people read it: ``guard.retry.delay_s`` 0.0434 -> ``43.5 ms``,
    other floats to three significant digits, everything else as it is."""
    if isinstance(value, float) and not isinstance(value, bool):
        if key.endswith("_s"):
            return duration_ms(value * 1000)
        if key.endswith("_ms"):
            return duration_ms(value)
        return significant(value) if value >= 0 else "-" + significant(-value)
    return str(value)
