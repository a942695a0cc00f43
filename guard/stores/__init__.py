"""Stores: the pipeline's only shared state. Protocols in ``base``; memory and SQLite backends; the
lease clocks claims are judged on (``leaseclock``).

The Redis backend lives in ``guard.stores.redis`` and is not imported here, so the guard runs
without the optional ``redis`` package.
"""

from guard.stores.base import (
    ApprovalState,
    ApprovalStore,
    Ceiling,
    Claim,
    ClaimAsk,
    ClaimsAfterCounting,
    ClaimState,
    CounterStore,
    DecidesThenClaims,
    IdempotencyStore,
    KeyRecord,
    PendingAction,
    StoreFull,
)
from guard.stores.bundle import Stores
from guard.stores.leaseclock import LeaseClock, host_lease_clock, process_lease_clock
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
    "ClaimAsk",
    "ClaimState",
    "ClaimsAfterCounting",
    "CounterStore",
    "DecidesThenClaims",
    "IdempotencyStore",
    "KeyRecord",
    "LeaseClock",
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
    "host_lease_clock",
    "open_sqlite_stores",
    "process_lease_clock",
]
