"""The three stores a guard runs on, as one value: opened together, closed together.

``Stores.memory()`` for one process; ``open_sqlite_stores`` (``guard.stores.sqlite``) and
``open_redis_stores`` (``guard.stores.redis``) return their engine's subclass, which closes what it
opened. The gateway, ``callgate approvals`` and embedding code pass this one type around.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Self

from guard.stores.base import ApprovalStore, CounterStore, IdempotencyStore
from guard.stores.memory import MemoryApprovalStore, MemoryCounterStore, MemoryIdempotencyStore

__all__ = ["Stores"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Stores:
    """The idempotency, approval and counter stores of one deployment."""

    idempotency: IdempotencyStore
    approvals: ApprovalStore
    counters: CounterStore

    @classmethod
    def memory(cls) -> Stores:
        """Fresh in-memory stores: one process, gone when it ends."""
        return cls(
            idempotency=MemoryIdempotencyStore(),
            approvals=MemoryApprovalStore(),
            counters=MemoryCounterStore(),
        )

    def close(self) -> None:
        """Release what opening the stores acquired (nothing, in memory)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
