"""Fakes for tests, shipped so users can test their own tools the way callgate tests its own."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from guard.call import Call, RetryRecord, StageRecord
from guard.result import ToolResult

__all__ = ["ManualClock", "RecordingObserver"]


class ManualClock:
    """A clock that moves only when told: ``sleep`` advances it instantly, so backoff costs no time.

    ``time_ns`` (span timestamps) is the manual time plus the real time elapsed since the last
    move, so stage durations stay real while calls land where the test or the demo put them. A
    move forward never takes ``time_ns`` back: a backoff shorter than the real time already
    counted keeps the real time, so a span never ends before it starts. Only a move backward (a
    clock stepped back on purpose) goes back.
    """

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.time = start
        self.slept: list[float] = []
        self._moved_at = time.perf_counter_ns()
        self._carry = 0  # real nanoseconds counted before a forward move shorter than them

    def now(self) -> float:
        return self.time

    def time_ns(self) -> int:
        return int(self.time * 1e9) + self._carry + (time.perf_counter_ns() - self._moved_at)

    def advance(self, seconds: float) -> None:
        shown = self.time_ns()
        self.time += seconds
        self._moved_at = time.perf_counter_ns()
        self._carry = max(0, shown - int(self.time * 1e9)) if seconds >= 0 else 0

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)

    def lease_clock(self) -> tuple[str, float]:
        """This clock as a store's lease clock (``guard.stores.leaseclock``), for a test that
        moves leases by hand: ``MemoryIdempotencyStore(lease_clock=clock.lease_clock)``."""
        return "manual", self.time

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


@dataclass
class RecordingObserver:
    """Keeps every event, for assertions about what the pipeline reported."""

    started: list[Call] = field(default_factory=list)
    stages: list[tuple[Call, StageRecord]] = field(default_factory=list)
    stage_starts: list[tuple[Call, str]] = field(default_factory=list)
    retries: list[tuple[Call, RetryRecord]] = field(default_factory=list)
    ended: list[tuple[Call, ToolResult]] = field(default_factory=list)

    def call_started(self, call: Call) -> None:
        self.started.append(call)

    def stage_started(self, call: Call, stage: str) -> None:
        self.stage_starts.append((call, stage))

    def stage_ended(self, call: Call, record: StageRecord) -> None:
        self.stages.append((call, record))

    def retry_scheduled(self, call: Call, retry: RetryRecord) -> None:
        self.retries.append((call, retry))

    def call_ended(self, call: Call, result: ToolResult) -> None:
        self.ended.append((call, result))
