"""Stores: the pipeline's only shared state. Protocols in ``base``; memory and SQLite backends.

The Redis backend lives in ``guard.stores.redis`` and is not imported here, so the guard runs
without the optional ``redis`` package.
"""

from guard.stores.base import (
    ApprovalState,
    ApprovalStore,
    Ceiling,
    Claim,
    ClaimState,
    CounterStore,
    IdempotencyStore,
    KeyRecord,
    PendingAction,
    StoreFull,
)
from guard.stores.bundle import Stores
from guard.stores.memory import MemoryApprovalStore, MemoryCounterStore, MemoryIdempotencyStore
from guard.stores.sqlite import (
    SQLiteApprovalStore,
    SQLiteCounterStore,
    SQLiteIdempotencyStore,
    SQLiteStores,
    open_sqlite_stores,
)

__all__ = [
    "ApprovalState",
    "ApprovalStore",
    "Ceiling",
    "Claim",
    "ClaimState",
    "CounterStore",
    "IdempotencyStore",
    "KeyRecord",
    "MemoryApprovalStore",
    "MemoryCounterStore",
    "MemoryIdempotencyStore",
    "PendingAction",
    "SQLiteApprovalStore",
    "SQLiteCounterStore",
    "SQLiteIdempotencyStore",
    "SQLiteStores",
    "StoreFull",
    "Stores",
    "open_sqlite_stores",
]
