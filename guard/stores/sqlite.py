"""SQLite stores: durable across restarts, safe for several threads and processes on one host.

How the guarantees are kept:

- **WAL journal**: readers never block the writer and a crash never leaves a torn page.
- **busy timeout**: a writer that finds the file locked waits for its turn instead of failing.
- **Atomic read-decide-write**: every operation is either one statement (counter upserts) or one
  ``BEGIN IMMEDIATE`` transaction (claims, decisions). IMMEDIATE takes the write lock *before* the
  read, so two processes can never both see a key free and both claim it.
- **One connection per thread** (``guard.stores._sqlite_base``), all closed by ``close()``.

The expiry and claim rules are shared with the memory stores (``guard.stores._rules``). Expired
rows read as absent; ``purge`` is the only thing that deletes them, so hosts call it periodically.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guard.stores._rules import (
    ABANDONED_RETENTION,
    CLAIMED,
    UNKNOWN_MARK,
    claim_deadline,
    claim_outcome,
    decision,
    lock_outcome,
    outcome_unknown,
)
from guard.stores._sqlite_base import SQLiteStoreBase, Synchronous
from guard.stores.base import (
    PENDING_ACTION_FIELDS,
    ApprovalState,
    ApprovalStore,
    Claim,
    CounterStore,
    IdempotencyStore,
    KeyRecord,
    OneStepCounters,
    PendingAction,
)
from guard.stores.bundle import Stores
from guard.stores.leaseclock import LeaseClock, host_lease_clock

__all__ = [
    "APPROVALS_DDL",
    "COUNTERS_DDL",
    "IDEMPOTENCY_DDL",
    "SQLiteApprovalStore",
    "SQLiteCounterStore",
    "SQLiteIdempotencyStore",
    "SQLiteStores",
    "open_sqlite_stores",
]

IDEMPOTENCY_DDL = (
    """
    CREATE TABLE IF NOT EXISTS idempotency (
        key         TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        result      TEXT,           -- NULL while the key is claimed and in flight
        claimed_at  REAL NOT NULL,
        expires_at  REAL NOT NULL,  -- claim_deadline while claimed, end of replay once completed
        lock        TEXT,           -- on a claim: the lock it holds, settled with it
        holder      TEXT,           -- on a lock: the key of the claim holding it
        lease_epoch TEXT,           -- the claim's stamp on the store's lease clock: its epoch
        leased_at   REAL            -- and its reading (guard.stores.leaseclock)
    )
    """,
    "CREATE INDEX IF NOT EXISTS idempotency_expires_at ON idempotency (expires_at)",
)

APPROVALS_DDL = (
    """
    CREATE TABLE IF NOT EXISTS approvals (
        id           TEXT PRIMARY KEY,
        session_id   TEXT NOT NULL,
        principal_id TEXT NOT NULL,
        role         TEXT NOT NULL,
        scopes       TEXT NOT NULL,  -- JSON array of strings
        tool         TEXT NOT NULL,
        arguments    TEXT NOT NULL,  -- canonical JSON: exactly what the approver saw
        fingerprint  TEXT NOT NULL,
        proposal_key TEXT NOT NULL,
        call_id      TEXT,
        reason       TEXT NOT NULL,
        created_at   REAL NOT NULL,
        expires_at   REAL NOT NULL,
        state        TEXT NOT NULL,  -- an ApprovalState value
        decided_by   TEXT,
        decided_at   REAL,
        authenticated INTEGER NOT NULL DEFAULT 1,  -- 0: proposed by an anonymous session
        warnings     TEXT NOT NULL DEFAULT '[]',   -- JSON: the checks' warnings on the proposal
        sensitive    TEXT NOT NULL DEFAULT '[]',   -- JSON array: argument names to mask on display
        seal         TEXT NOT NULL DEFAULT ''      -- keyed MAC of the facts, checked before it runs
    )
    """,
    "CREATE INDEX IF NOT EXISTS approvals_proposal_key ON approvals (proposal_key)",
)

COUNTERS_DDL = (
    """
    CREATE TABLE IF NOT EXISTS counters (
        key        TEXT PRIMARY KEY,
        value      INTEGER NOT NULL,
        expires_at REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS counters_expires_at ON counters (expires_at)",
)


_SELECT_RECORD = """
SELECT fingerprint, result, lease_epoch, leased_at, expires_at, holder
FROM idempotency WHERE key = :key
"""

_UPSERT_CLAIM = """
INSERT INTO idempotency
    (key, fingerprint, result, claimed_at, expires_at, lock, holder, lease_epoch, leased_at)
VALUES (:key, :fingerprint, NULL, :now, :expires_at, :lock, :holder, :lease_epoch, :leased_at)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    result = NULL,
    claimed_at = excluded.claimed_at,
    expires_at = excluded.expires_at,
    lock = excluded.lock,
    holder = excluded.holder,
    lease_epoch = excluded.lease_epoch,
    leased_at = excluded.leased_at
"""

_ADDED_COLUMNS = (
    ("lock", "TEXT"),
    ("holder", "TEXT"),
    ("lease_epoch", "TEXT"),
    ("leased_at", "REAL"),
)

_UPSERT_RESULT = """
INSERT INTO idempotency (key, fingerprint, result, claimed_at, expires_at)
VALUES (:key, :fingerprint, :result, :now, :expires_at)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    result = excluded.result,
    expires_at = excluded.expires_at
"""

_PURGE = """
DELETE FROM idempotency WHERE expires_at < :now
    AND (result IS NOT NULL OR lease_epoch IS NOT :epoch OR leased_at < :abandoned)
"""

# The in-flight lock the claim of :key holds, if it still holds one.
_HELD = """
key = (SELECT lock FROM idempotency WHERE key = :key) AND holder = :key AND result IS NULL
"""
_KEEP_LOCK = "UPDATE idempotency SET result = :result, expires_at = :expires_at WHERE" + _HELD
_DROP_LOCK = "DELETE FROM idempotency WHERE" + _HELD


class SQLiteIdempotencyStore(SQLiteStoreBase):
    """Claims and results in the ``idempotency`` table; a claim is one IMMEDIATE transaction.

    Leases are judged on ``lease_clock``, by default the host's (``host_lease_clock``: every
    process on the host reads the same steady clock), never on the callers' ``now``."""

    _DDL = IDEMPOTENCY_DDL

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 5.0,
        synchronous: Synchronous = "NORMAL",
        allow_writable_file: bool = False,
        lease_clock: LeaseClock = host_lease_clock,
    ) -> None:
        super().__init__(
            path,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            allow_writable_file=allow_writable_file,
        )
        self._lease_clock = lease_clock
        # A file made before locks or lease stamps existed gains their columns. Its unstamped
        # claims read as stale (``_rules.lease_stale``): stop older processes before upgrading.
        with self._immediate() as conn:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(idempotency)")}
            for column, kind in _ADDED_COLUMNS:
                if column not in columns:
                    conn.execute(f"ALTER TABLE idempotency ADD COLUMN {column} {kind}")

    def claim(
        self,
        key: str,
        fingerprint: str,
        *,
        now: float,
        lease: float,
        take_stale: bool = True,
        lock: str | None = None,
    ) -> Claim:
        with self._immediate() as conn:
            clock = self._lease_clock()  # inside the write lock: stamps follow the claims' order
            row = conn.execute(_SELECT_RECORD, {"key": key}).fetchone()
            if row is not None:
                stored_fingerprint, result, lease_epoch, leased_at, expires_at, _ = row
                outcome = claim_outcome(
                    stored_fingerprint=stored_fingerprint,
                    result=result,
                    lease_epoch=lease_epoch,
                    leased_at=leased_at,
                    expires_at=expires_at,
                    fingerprint=fingerprint,
                    now=now,
                    clock=clock,
                    lease=lease,
                    take_stale=take_stale,
                )
                if outcome is not None:
                    return outcome
            params = {
                "key": key,
                "fingerprint": fingerprint,
                "now": now,
                "expires_at": claim_deadline(now=now, lease=lease),
                "lock": lock,
                "holder": None,
                "lease_epoch": clock[0],
                "leased_at": clock[1],
            }
            if lock is not None:
                held = conn.execute(_SELECT_RECORD, {"key": lock}).fetchone()
                if held is not None:
                    stored_fingerprint, result, lease_epoch, leased_at, expires_at, holder = held
                    refused = lock_outcome(
                        holder=holder,
                        key=key,
                        stored_fingerprint=stored_fingerprint,
                        result=result,
                        lease_epoch=lease_epoch,
                        leased_at=leased_at,
                        expires_at=expires_at,
                        fingerprint=fingerprint,
                        now=now,
                        clock=clock,
                        lease=lease,
                    )
                    if refused is not None:
                        return refused
                conn.execute(_UPSERT_CLAIM, {**params, "key": lock, "lock": None, "holder": key})
            conn.execute(_UPSERT_CLAIM, params)
            return CLAIMED

    def complete(self, key: str, fingerprint: str, result: str, *, now: float, ttl: float) -> None:
        params = {
            "key": key,
            "fingerprint": fingerprint,
            "result": result,
            "now": now,
            "expires_at": now + ttl,
        }
        with self._immediate() as conn:
            conn.execute(_UPSERT_RESULT, params)
            if outcome_unknown(result):
                conn.execute(_KEEP_LOCK, params)
            else:
                conn.execute(_DROP_LOCK, {"key": key})

    def release(self, key: str) -> None:
        # Only an in-flight claim (and the lock it holds): a completed result must keep replaying.
        with self._immediate() as conn:
            held = conn.execute(
                "SELECT 1 FROM idempotency WHERE key = :key AND result IS NULL", {"key": key}
            ).fetchone()
            if held is not None:
                conn.execute(_DROP_LOCK, {"key": key})
                conn.execute("DELETE FROM idempotency WHERE key = :key", {"key": key})

    def purge(self, now: float) -> int:
        # An in-flight claim also waits ABANDONED_RETENTION on the lease clock: a caller's clock
        # far ahead must not delete a live claim (its key would then be free for a second write).
        epoch, lease_now = self._lease_clock()
        params = {"now": now, "epoch": epoch, "abandoned": lease_now - ABANDONED_RETENTION}
        return self._conn().execute(_PURGE, params).rowcount

    def record(self, key: str) -> KeyRecord | None:
        row = self._conn().execute(_SELECT_KEY_RECORD + " WHERE key = :key", {"key": key})
        found = row.fetchone()
        return None if found is None else KeyRecord(**dict(zip(_KEY_RECORD, found, strict=True)))

    def unknown(self, *, now: float) -> list[KeyRecord]:
        # instr() narrows to results spelling the mark; outcome_unknown parses to be sure.
        rows = self._conn().execute(
            _SELECT_KEY_RECORD + " WHERE instr(result, :mark) > 0 AND expires_at >= :now",
            {"mark": UNKNOWN_MARK, "now": now},
        )
        records = [KeyRecord(**dict(zip(_KEY_RECORD, row, strict=True))) for row in rows]
        return [r for r in records if r.result is not None and outcome_unknown(r.result)]


_KEY_RECORD = ("key", "fingerprint", "result", "claimed_at", "expires_at", "holder")
_SELECT_KEY_RECORD = f"SELECT {', '.join(_KEY_RECORD)} FROM idempotency"


_APPROVAL_COLUMNS = PENDING_ACTION_FIELDS
_SELECT_APPROVALS = f"SELECT {', '.join(_APPROVAL_COLUMNS)} FROM approvals"

_INSERT_APPROVAL = f"""
INSERT INTO approvals ({", ".join(_APPROVAL_COLUMNS)})
VALUES ({", ".join(":" + name for name in _APPROVAL_COLUMNS)})
"""

_FIND_PENDING = f"""
{_SELECT_APPROVALS}
WHERE proposal_key = :proposal_key AND state = 'pending' AND expires_at >= :now
ORDER BY created_at DESC, rowid DESC
LIMIT 1
"""

_FILED = f"""
{_SELECT_APPROVALS}
WHERE proposal_key = :proposal_key
ORDER BY created_at, rowid
"""

_DECIDE = """
UPDATE approvals SET state = :state, decided_by = :decided_by, decided_at = :decided_at
WHERE id = :id AND state = 'pending'
"""

# The SQL form of ``_rules.approval_purge_at``: retention after expiry or decision, if later.
_PURGE_APPROVALS = """
DELETE FROM approvals
WHERE max(expires_at, coalesce(decided_at, expires_at)) + :retention < :now
"""


# Columns added after the first release, as ``ALTER TABLE`` adds them to an older file. Rows
# written before have no seal, so they never verify: an old pending action cannot be run.
_ADDED_APPROVAL_COLUMNS = {
    "authenticated": "INTEGER NOT NULL DEFAULT 1",
    "warnings": "TEXT NOT NULL DEFAULT '[]'",
    "sensitive": "TEXT NOT NULL DEFAULT '[]'",
    "seal": "TEXT NOT NULL DEFAULT ''",
}


def _approval_params(action: PendingAction) -> dict[str, Any]:
    params = {name: getattr(action, name) for name in _APPROVAL_COLUMNS}
    params["scopes"] = json.dumps(list(action.scopes))
    params["sensitive"] = json.dumps(list(action.sensitive))
    params["state"] = action.state.value
    params["authenticated"] = int(action.authenticated)
    return params


def _approval(row: tuple[Any, ...]) -> PendingAction:
    values = dict(zip(_APPROVAL_COLUMNS, row, strict=True))
    values["scopes"] = tuple(json.loads(values["scopes"]))
    values["sensitive"] = tuple(json.loads(values["sensitive"]))
    values["state"] = ApprovalState(values["state"])
    values["authenticated"] = bool(values["authenticated"])
    return PendingAction(**values)


class SQLiteApprovalStore(SQLiteStoreBase):
    """Pending actions in the ``approvals`` table; decided ones kept for ``retention`` s."""

    _DDL = APPROVALS_DDL

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention: float = 86_400.0,
        busy_timeout: float = 5.0,
        synchronous: Synchronous = "NORMAL",
        allow_writable_file: bool = False,
    ) -> None:
        self._retention = retention
        super().__init__(
            path,
            busy_timeout=busy_timeout,
            synchronous=synchronous,
            allow_writable_file=allow_writable_file,
        )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        present = {row[1] for row in conn.execute("PRAGMA table_info(approvals)")}
        for name, declaration in _ADDED_APPROVAL_COLUMNS.items():
            if name not in present:
                conn.execute(f"ALTER TABLE approvals ADD COLUMN {name} {declaration}")

    def create(self, action: PendingAction) -> None:
        try:
            self._conn().execute(_INSERT_APPROVAL, _approval_params(action))
        except sqlite3.IntegrityError as err:
            raise ValueError(f"approval id {action.id!r} already exists") from err

    def get(self, approval_id: str) -> PendingAction | None:
        row = self._conn().execute(f"{_SELECT_APPROVALS} WHERE id = ?", (approval_id,)).fetchone()
        return None if row is None else _approval(row)

    def ids(self) -> list[str]:
        return [row[0] for row in self._conn().execute("SELECT id FROM approvals").fetchall()]

    def find_pending(self, proposal_key: str, *, now: float) -> PendingAction | None:
        params = {"proposal_key": proposal_key, "now": now}
        row = self._conn().execute(_FIND_PENDING, params).fetchone()
        return None if row is None else _approval(row)

    def file(self, action: PendingAction, *, now: float) -> PendingAction:
        params = {"proposal_key": action.proposal_key, "now": now}
        with self._immediate() as conn:
            row = conn.execute(_FIND_PENDING, params).fetchone()
            if row is not None:
                return _approval(row)
            try:
                conn.execute(_INSERT_APPROVAL, _approval_params(action))
            except sqlite3.IntegrityError as err:
                raise ValueError(f"approval id {action.id!r} already exists") from err
        return action

    def filed(self, proposal_key: str) -> list[PendingAction]:
        rows = self._conn().execute(_FILED, {"proposal_key": proposal_key}).fetchall()
        return [_approval(row) for row in rows]

    def decide(
        self, approval_id: str, *, approve: bool, by: str, now: float
    ) -> PendingAction | None:
        with self._immediate() as conn:
            row = conn.execute(f"{_SELECT_APPROVALS} WHERE id = ?", (approval_id,)).fetchone()
            if row is None:
                return None
            action = _approval(row)
            if action.state is not ApprovalState.PENDING:
                return action
            state = decision(approve=approve, expires_at=action.expires_at, now=now)
            # Nobody decided an expired action; the approver merely arrived too late.
            decided = action.decided(
                state, by=None if state is ApprovalState.EXPIRED else by, at=now
            )
            params = {
                "id": approval_id,
                "state": state.value,
                "decided_by": decided.decided_by,
                "decided_at": now,
            }
            conn.execute(_DECIDE, params)
            return decided

    def purge(self, now: float) -> int:
        params = {"retention": self._retention, "now": now}
        return self._conn().execute(_PURGE_APPROVALS, params).rowcount


# One statement each, so atomic without a transaction. An expired row restarts from zero, just
# as if purge had deleted it.
_INCR = """
INSERT INTO counters (key, value, expires_at) VALUES (:key, :amount, :expires_at)
ON CONFLICT (key) DO UPDATE SET
    value = CASE WHEN counters.expires_at < :now THEN 0 ELSE counters.value END + excluded.value,
    expires_at = excluded.expires_at
RETURNING value
"""

# Adds only if the total stays within the limit; rowcount says whether it did. The WHERE on the
# SELECT also keeps SQLite's parser from reading ON CONFLICT as a join constraint.
_ADD_WITHIN = """
INSERT INTO counters (key, value, expires_at)
SELECT :key, :amount, :expires_at WHERE :amount <= :limit
ON CONFLICT (key) DO UPDATE SET
    value = CASE WHEN counters.expires_at < :now THEN 0 ELSE counters.value END + excluded.value,
    expires_at = excluded.expires_at
WHERE CASE WHEN counters.expires_at < :now THEN 0 ELSE counters.value END + excluded.value
    <= :limit
"""


class SQLiteCounterStore(OneStepCounters, SQLiteStoreBase):
    """Counters in the ``counters`` table, each update a single atomic upsert."""

    _DDL = COUNTERS_DDL

    def admits(self, key: str, *, now: float) -> bool:
        """Always: the file has no cap and never evicts; a full disk fails the write (closed)."""
        return True

    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int:
        params = {"key": key, "amount": amount, "now": now, "expires_at": now + ttl}
        # fetchall, not fetchone: the statement must run to completion to release its lock.
        ((value,),) = self._conn().execute(_INCR, params).fetchall()
        return int(value)

    def get(self, key: str, *, now: float) -> int:
        row = (
            self._conn()
            .execute(
                "SELECT value FROM counters WHERE key = :key AND expires_at >= :now",
                {"key": key, "now": now},
            )
            .fetchone()
        )
        return 0 if row is None else int(row[0])

    def reset(self, key: str) -> None:
        self._conn().execute("DELETE FROM counters WHERE key = :key", {"key": key})

    def add_within(self, key: str, amount: int, limit: int, *, now: float, ttl: float) -> bool:
        params = {
            "key": key,
            "amount": amount,
            "limit": limit,
            "now": now,
            "expires_at": now + ttl,
        }
        return self._conn().execute(_ADD_WITHIN, params).rowcount == 1

    def purge(self, now: float) -> int:
        cursor = self._conn().execute("DELETE FROM counters WHERE expires_at < :now", {"now": now})
        return cursor.rowcount


@dataclass(frozen=True, kw_only=True, slots=True)
class SQLiteStores(Stores):
    """The three SQLite stores on one file, closed together."""

    def close(self) -> None:
        """Close all three stores' connections."""
        for store in (self.idempotency, self.approvals, self.counters):
            assert isinstance(store, SQLiteStoreBase)
            store.close()


def open_sqlite_stores(
    path: str | os.PathLike[str],
    *,
    retention: float = 86_400.0,
    busy_timeout: float = 5.0,
    synchronous: Synchronous = "NORMAL",
    allow_writable_file: bool = False,
    lease_clock: LeaseClock = host_lease_clock,
) -> SQLiteStores:
    """Open (creating if needed, mode 0600) the idempotency, approval and counter stores on one file.

    ``retention`` is how long decided or expired approvals are kept before ``purge`` deletes them.
    A file the group or others may write is refused (``PermissionError``) unless
    ``allow_writable_file``. Claims' leases are judged on ``lease_clock`` (the host's by default).
    """
    opened: list[SQLiteStoreBase] = []
    common: dict[str, Any] = {
        "busy_timeout": busy_timeout,
        "synchronous": synchronous,
        "allow_writable_file": allow_writable_file,
    }
    try:
        idempotency = SQLiteIdempotencyStore(path, lease_clock=lease_clock, **common)
        opened.append(idempotency)
        approvals = SQLiteApprovalStore(path, retention=retention, **common)
        opened.append(approvals)
        counters = SQLiteCounterStore(path, **common)
    except BaseException:
        for store in opened:
            store.close()
        raise
    return SQLiteStores(idempotency=idempotency, approvals=approvals, counters=counters)


if TYPE_CHECKING:
    # Protocols are structural: these lines make mypy prove each class still fits its protocol.
    _idempotency: type[IdempotencyStore] = SQLiteIdempotencyStore
    _approvals: type[ApprovalStore] = SQLiteApprovalStore
    _counters: type[CounterStore] = SQLiteCounterStore
