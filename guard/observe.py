"""The observer protocol: how the pipeline reports what it does, without knowing who listens.

``guard`` never imports OpenTelemetry; ``telemetry.OTelObserver`` implements this protocol. An
observer must not raise and must not block: the pipeline calls it inline, and a failure in it is
logged and swallowed by the pipeline so that telemetry never breaks a tool call.

An observer that only reads the finished call (``call.stages`` has every stage's timing) can set
the class attribute ``wants_stage_events = False``: the pipeline then skips ``stage_started`` and
``stage_ended`` and builds no per-stage records on the calling thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from guard.call import Call, RetryRecord, StageRecord
from guard.result import ToolResult

__all__ = ["BaseObserver", "MultiObserver", "NullObserver", "Observer", "wants_stage_events"]


class Observer(Protocol):
    """Receives the events of every call."""

    def call_started(self, call: Call) -> None:
        """A call entered the pipeline (or a pending call resumed after a human decision)."""

    def stage_started(self, call: Call, stage: str) -> None:
        """A stage is about to run."""

    def stage_ended(self, call: Call, record: StageRecord) -> None:
        """A stage ran: it passed, rejected, or ended the call."""

    def retry_scheduled(self, call: Call, retry: RetryRecord) -> None:
        """An attempt failed transiently and will be retried after ``retry.delay``."""

    def call_ended(self, call: Call, result: ToolResult) -> None:
        """The call has its result; ``call`` is complete."""


class BaseObserver:
    """Every event ignored: subclass it and override the events you want."""

    wants_stage_events = True

    def call_started(self, call: Call) -> None:
        """Ignored."""

    def stage_started(self, call: Call, stage: str) -> None:
        """Ignored."""

    def stage_ended(self, call: Call, record: StageRecord) -> None:
        """Ignored."""

    def retry_scheduled(self, call: Call, retry: RetryRecord) -> None:
        """Ignored."""

    def call_ended(self, call: Call, result: ToolResult) -> None:
        """Ignored."""


class NullObserver(BaseObserver):
    """Listens to nothing. The default: the pipeline recognises it and skips every event."""

    wants_stage_events = False


class MultiObserver:
    """Fans events out to several observers, in order."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self._observers = tuple(observers)
        self.wants_stage_events = any(wants_stage_events(o) for o in self._observers)

    def call_started(self, call: Call) -> None:
        for observer in self._observers:
            observer.call_started(call)

    def stage_started(self, call: Call, stage: str) -> None:
        for observer in self._observers:
            observer.stage_started(call, stage)

    def stage_ended(self, call: Call, record: StageRecord) -> None:
        for observer in self._observers:
            observer.stage_ended(call, record)

    def retry_scheduled(self, call: Call, retry: RetryRecord) -> None:
        for observer in self._observers:
            observer.retry_scheduled(call, retry)

    def call_ended(self, call: Call, result: ToolResult) -> None:
        for observer in self._observers:
            observer.call_ended(call, result)


def wants_stage_events(observer: Observer) -> bool:
    """Whether ``observer`` listens to stage events (true unless it says otherwise)."""
    return bool(getattr(observer, "wants_stage_events", True))
