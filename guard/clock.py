"""Time as a port: the pipeline never reads the system clock directly, so tests can move it."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Wall time for expiries and days, monotonic time for durations, and sleeping for backoff."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Wait for ``seconds`` without blocking the event loop."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
