"""The soak's domain, for ``bench/soak_agent.py``: a payments backend with its own ledger, its tools,
the policy, and the seeded stream of calls.

The ledger (``ledger.db``, SQLite) records every applied write with the idempotency key it was
sent, in the same transaction as the effect, so the harness counts effects from outside the guard:

- ``balance`` (read; fails transiently now and then);
- ``pay`` (write, the backend does NOT deduplicate: ``idempotent_backend=False``; some attempts
  fail before the effect, some lose their answer after it (``TimeoutError``), some raise a bug
  after it);
- ``transfer`` (write, the backend deduplicates by key: a retry after a lost answer is safe);
- ``big_pay`` (write, high risk: waits for a human, whom the agent plays, approving or denying).

Each write declares a status check (``reconcile=``) that reads the ledger by key.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from guard import (
    Effect,
    Outcome,
    Policy,
    Principal,
    RetryPolicy,
    Risk,
    RolePolicy,
    ToolContext,
    TransientError,
    tool,
)

MASKING_KEY = "soak-masking-key-not-a-secret"
"""Every process of a run shares this key, so ``callgate verify`` can check every chain."""

CLAIM_LEASE = 3.0
"""Seconds before an in-flight claim left by a killed agent may be taken over."""

ACCOUNTS = tuple(f"ACC-{n}" for n in range(1, 9))

PHASE_IDLE, PHASE_GUARD, PHASE_UNCOMMITTED, PHASE_COMMITTED, PHASE_PENDING = 0, 1, 2, 3, 4
"""Where an agent is (``Phase``): idle, in the guard, inside a write before or after its commit,
or holding a pending approval it has not decided yet (its id in ``<agent>/pending``)."""


# -- the backend ----------------------------------------------------------------------------------


class Ledger:
    """The backend's own record: one row per applied write, committed with the effect."""

    def __init__(self, path: Path, agent: int, phase: Phase) -> None:
        self._db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS applied (id INTEGER PRIMARY KEY, key TEXT NOT NULL, "
            "tool TEXT NOT NULL, account TEXT NOT NULL, amount INTEGER NOT NULL, "
            "agent INTEGER NOT NULL, pid INTEGER NOT NULL, at REAL NOT NULL)"
        )
        self._agent = agent
        self._phase = phase
        self._seen: set[str] = set()

    def first_sighting(self, key: str) -> bool:
        """True the first time this process meets ``key``."""
        new = key not in self._seen
        self._seen.add(key)
        return new

    def apply(self, key: str, tool: str, account: str, amount: int, *, dedupe: bool) -> int:
        """Write the effect and its ledger row in one transaction; the row id is the receipt."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if dedupe:  # a backend that honours idempotency keys answers a repeat from its record
                row = db.execute("SELECT id FROM applied WHERE key = ?", (key,)).fetchone()
                if row is not None:
                    db.execute("COMMIT")
                    return int(row[0])
            cursor = db.execute(
                "INSERT INTO applied (key, tool, account, amount, agent, pid, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, tool, account, amount, self._agent, os.getpid(), time.time()),
            )
            self._phase.set(PHASE_UNCOMMITTED)
            time.sleep(0.002)  # the effect is in flight: a kill here must roll it back
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        self._phase.set(PHASE_COMMITTED)
        time.sleep(0.002)  # committed, not answered: a kill here leaves an unknown outcome
        return int(cursor.lastrowid or 0)

    def status(self, key: str) -> Outcome:
        """The backend's status endpoint: did a write with this key take effect?"""
        row = self._db.execute("SELECT 1 FROM applied WHERE key = ?", (key,)).fetchone()
        return Outcome.APPLIED if row is not None else Outcome.NOT_APPLIED


class Phase:
    """Where the agent is, in a 16-byte mapped file the harness reads: phase, then call index."""

    def __init__(self, path: Path) -> None:
        # Zeroed in place, never truncated: the harness may be reading it through its own map
        # while this incarnation starts, and a map over a truncated file faults (SIGBUS).
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, bytes(16), 0)
        self._file = os.fdopen(fd, "r+b")
        self._map = mmap.mmap(self._file.fileno(), 16)

    def set(self, phase: int, index: int | None = None) -> None:
        self._map[0] = phase
        if index is not None:
            self._map[8:16] = struct.pack("<q", index)


@dataclass(frozen=True, kw_only=True)
class Deps:
    ledger: Ledger


class Balance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(pattern=r"^ACC-[0-9]+$", description="The account id, ACC-<n>.")


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(pattern=r"^ACC-[0-9]+$", description="The account id, ACC-<n>.")
    amount_cents: int = Field(gt=0, le=1_000_000, description="Cents; 25.90 is 2590.")
    reference: str = Field(max_length=40, description="What the payment is for.")


def _fate(key: str | None, attempt: int) -> float:
    """A draw fixed by the key and attempt, so every agent sending a key meets the same backend."""
    return random.Random(f"{key}:{attempt}").random()


def _write(args: Payment, ctx: ToolContext[Deps], tool: str, *, dedupe: bool) -> dict[str, Any]:
    assert ctx.idempotency_key is not None
    draw = _fate(ctx.idempotency_key, ctx.attempt)
    if draw < 0.05:
        raise TransientError("connection reset before the request was sent")
    receipt = ctx.deps.ledger.apply(
        ctx.idempotency_key, tool, args.account, args.amount_cents, dedupe=dedupe
    )
    if draw < 0.08:
        raise TimeoutError("the answer was lost after the backend committed")
    if draw < 0.09 and ctx.deps.ledger.first_sighting(ctx.idempotency_key):
        raise RuntimeError("a bug after the effect")  # once: a bug, not a broken backend
    return {"receipt": receipt, "account": args.account}


def _status(args: Payment, ctx: ToolContext[Deps]) -> Outcome:
    """The status check the guard asks when a repeat finds the outcome unknown."""
    assert ctx.idempotency_key is not None
    return ctx.deps.ledger.status(ctx.idempotency_key)


@tool(arguments=Balance, scope="read")
def balance(args: Balance, ctx: ToolContext[Deps]) -> dict[str, Any]:
    """Read an account's balance."""
    if random.random() < 0.05:
        raise TransientError("read replica unavailable")
    return {"account": args.account, "cents": 100_000}


@tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.MEDIUM, scope="pay",
      idempotent_backend=False, timeout=0.5, reconcile=_status,
      retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05))  # fmt: skip
def pay(args: Payment, ctx: ToolContext[Deps]) -> dict[str, Any]:
    """Pay from an account. The backend does not deduplicate."""
    return _write(args, ctx, "pay", dedupe=False)


@tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.MEDIUM, scope="pay",
      timeout=0.5, reconcile=_status,
      retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05))  # fmt: skip
def transfer(args: Payment, ctx: ToolContext[Deps]) -> dict[str, Any]:
    """Transfer from an account. The backend deduplicates by idempotency key."""
    return _write(args, ctx, "transfer", dedupe=True)


@tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.HIGH, scope="pay",
      idempotent_backend=False, timeout=0.5, reconcile=_status,
      retry=RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05))  # fmt: skip
def big_pay(args: Payment, ctx: ToolContext[Deps]) -> dict[str, Any]:
    """A large payment: a human approves it first."""
    return _write(args, ctx, "big_pay", dedupe=False)


TOOLS = (balance, pay, transfer, big_pay)
POLICY = Policy(
    roles={"agent": RolePolicy(tools=frozenset(t.name for t in TOOLS))},
    max_steps_per_session=100_000,
    max_steps_per_turn=100_000,
    rate_limit=None,
    max_invalid_in_a_row=1_000,
    max_identical_calls=1_000,
    claim_lease=CLAIM_LEASE,
)
PRINCIPAL = Principal(id="soak", role="agent", scopes=frozenset({"read", "pay"}))


# -- the calls ------------------------------------------------------------------------------------

Decision = Literal["approve", "deny", ""]


@dataclass(frozen=True, kw_only=True)
class Planned:
    """One call of the seeded stream."""

    session: str
    tool: str
    arguments: str
    decision: Decision = ""


def plan(seed: int, agent: int, index: int) -> Planned:
    """The agent's call number ``index``: the same for every run with this seed."""
    rng = random.Random(f"{seed}:{agent}:{index}")
    draw = rng.random()
    own = f"a{agent}-s{index // 20}"
    account = rng.choice(ACCOUNTS)
    payment = {"account": account, "amount_cents": rng.randint(1, 9_999), "reference": f"r{index}"}
    if draw < 0.30:
        return Planned(session=own, tool="balance", arguments=json.dumps({"account": account}))
    if draw < 0.55:
        return Planned(session=own, tool="pay", arguments=json.dumps(payment))
    if draw < 0.65:
        return Planned(session=own, tool="transfer", arguments=json.dumps(payment))
    if draw < 0.80:  # every agent sends the same writes in a shared session: racing twins
        block, slot = index // 8, index % 3
        twin = random.Random(f"{seed}:shared:{block}:{slot}")
        shared = {"account": twin.choice(ACCOUNTS), "amount_cents": twin.randint(1, 9_999),
                  "reference": f"shared{block}.{slot}"}  # fmt: skip
        name = "pay" if slot != 2 else "transfer"
        return Planned(session=f"shared-{block}", tool=name, arguments=json.dumps(shared))
    if draw < 0.87:
        decision: Decision = "approve" if rng.random() < 0.7 else "deny"
        return Planned(
            session=own, tool="big_pay", arguments=json.dumps(payment), decision=decision
        )
    if draw < 0.93:  # a model's unit mistake: rejected by the schema, nothing runs
        wrong = dict(payment, amount_cents=str(payment["amount_cents"] / 100))
        return Planned(session=own, tool="pay", arguments=json.dumps(wrong))
    # the model retries its previous call (a replay if that was a write)
    return plan(seed, agent, index - 1) if index > 0 else plan(seed, agent, index + 1)
