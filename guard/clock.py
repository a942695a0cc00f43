"""Time as a port: the pipeline never reads the system clock directly, so tests can move it."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall time for expiries and days, monotonic time for durations, and sleeping for backoff."""

    def now(self) -> float:
        """Seconds since the epoch: what expiries, windows and days are computed from."""

    def time_ns(self) -> int:
        """Nanoseconds since the epoch, for span timestamps: read at every stage boundary."""

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""

    async def asleep(self, seconds: float) -> None:
        """Wait for ``seconds`` without blocking the event loop."""


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    # The builtin itself, not a wrapper: the pipeline reads it ten times per call.
    time_ns = staticmethod(time.time_ns)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
