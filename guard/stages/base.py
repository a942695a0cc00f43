"""What a stage is, what it can reach, and how it answers."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from guard.call import Call
from guard.clock import Clock
from guard.codes import ReasonCode
from guard.observe import Observer
from guard.policy import Policy
from guard.provenance import ProvenanceLedger
from guard.refusals import Refusals
from guard.registry import ToolRegistry
from guard.result import Outcome, ToolResult
from guard.stages.marks import RecentMarks
from guard.stores.base import ApprovalStore, CounterStore, IdempotencyStore

__all__ = ["Env", "Stage", "counted", "digest", "reject"]


class Stage(Protocol):
    """One step of the pipeline: returns None to continue, or the call's final result.

    A stage that must wait on the world (only execute does) is a coroutine function instead: it
    waits through ``call.waiter`` (``guard.waiting``), so one body serves sync and async calls."""

    @property
    def name(self) -> str:
        """The stage's name in spans and records: ``budget``, ``resolve``, ..."""

    def __call__(self, call: Call) -> ToolResult | Awaitable[ToolResult] | None:
        """Run against ``call``; may fill in fields of ``call`` for later stages."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Env:
    """The ports every stage may use. Injected, never global."""

    registry: ToolRegistry
    policy: Policy
    idempotency: IdempotencyStore
    approvals: ApprovalStore
    counters: CounterStore
    clock: Clock
    observer: Observer
    deps: Any = None
    """The host's dependencies, handed to every check and handler (``CheckContext.deps``)."""
    refusals: Refusals = field(default_factory=dict, compare=False)
    """The guard's map of library exceptions to refusal codes (``Guard(refusals=...)``)."""
    provenance: ProvenanceLedger | None = None
    """Where values came from, when the guard keeps provenance (see ``Policy.record_provenance``)."""
    seal_key: bytes
    """The key pending actions are sealed with (``guard.stages.confirm.seal_key``)."""
    marks: RecentMarks = field(default_factory=RecentMarks, compare=False)
    """The session marks this guard wrote lately (``guard.stages.marks``): not rewritten."""


def reject(
    call: Call,
    code: ReasonCode,
    message: str,
    *,
    data: dict[str, Any] | None = None,
    fixable: bool | None = None,
    outcome: Outcome = Outcome.NOT_APPLIED,
    approval_id: str | None = None,
) -> ToolResult:
    """A final result for ``call`` that did not succeed. ``fixable`` overrides the code's flag."""
    return ToolResult(
        ok=False,
        code=code,
        message=message,
        data=data,
        outcome=outcome,
        call_id=call.call_id,
        tool=call.tool,
        idempotency_key=call.idempotency_key,
        approval_id=approval_id or (call.approval.id if call.approval else None),
        fixable=code.fixable if fixable is None else fixable,
    )


def digest(*parts: str) -> str:
    """A short, collision-safe hash of ``parts`` (joined with a separator no part contains)."""
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()


def counted(call: Call, counters: CounterStore, key: str) -> int:
    """A counter's value for ``call``: as read ahead with its batched trip (``call.counts``, a
    store that batches), else from the store."""
    ahead = call.counts
    if ahead is not None and key in ahead:
        return ahead[key]
    return counters.get(key, now=call.now)
