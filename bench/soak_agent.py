"""One soak agent process: a seeded stream of tool calls through the guard, for ``bench/soak.py``.

Run by the harness, never by hand::

    python bench/soak_agent.py --home DIR --index 0 --seed 7 --otlp URL ...

The domain is a small payments backend whose ledger (``ledger.db``, SQLite) records every applied
write with the idempotency key it was sent, in the same transaction as the effect, so the harness
can count effects from outside the guard:

- ``balance`` (read; fails transiently now and then);
- ``pay`` (write, the backend does NOT deduplicate: ``idempotent_backend=False``; some attempts
  fail before the effect, some lose their answer after it (``TimeoutError``), some raise a bug
  after it);
- ``transfer`` (write, the backend deduplicates by key: a retry after a lost answer is safe);
- ``big_pay`` (write, high risk: waits for a human, whom the agent plays, approving or denying).

Each write declares a status check (``reconcile=``) that reads the ledger by key; after an
``unknown`` outcome the agent sends the call again, and the guard settles it.

Every call's reported outcome is appended to ``outcomes.jsonl`` and fsynced before the next call,
so a SIGKILL loses at most the call in flight. A restarted agent resumes at the first call it did
not report and sends it again, as a model whose answer was lost would. ``phase`` (16 bytes, mmap)
tells the harness where the agent is, so it can kill it mid-call: 1 in the guard, 2 in the
handler with the effect written but not committed, 3 committed and not yet answered.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import sqlite3
import struct
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from pydantic import BaseModel, ConfigDict, Field

import telemetry
from guard import (
    Effect,
    Guard,
    GuardError,
    Outcome,
    Policy,
    Principal,
    RetryPolicy,
    Risk,
    RolePolicy,
    ToolContext,
    ToolResult,
    TransientError,
    tool,
)
from guard.stores import open_sqlite_stores
from guard.testing import ManualClock

MASKING_KEY = "soak-masking-key-not-a-secret"
"""Every process of a run shares this key, so ``callgate verify`` can check every chain."""

CLAIM_LEASE = 3.0
"""Seconds before an in-flight claim left by a killed agent may be taken over."""

ACCOUNTS = tuple(f"ACC-{n}" for n in range(1, 9))

PHASE_IDLE, PHASE_GUARD, PHASE_UNCOMMITTED, PHASE_COMMITTED = 0, 1, 2, 3


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
        path.write_bytes(bytes(16))
        self._file = path.open("r+b")
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


# -- the span exporter that remembers what the sidecar acknowledged ------------------------------


class AckingExporter(SpanExporter):
    """OTLP/HTTP to the sidecar; the ids of every batch it acknowledged go to a fsynced file."""

    def __init__(self, endpoint: str, acked: Path) -> None:
        self._inner = OTLPSpanExporter(endpoint=endpoint, timeout=3)
        self._fd = os.open(acked, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.acked = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            lines = "".join(
                f"{s.context.trace_id:032x} {s.context.span_id:016x}\n"
                for s in spans
                if s.context is not None
            )
            os.write(self._fd, lines.encode())
            os.fsync(self._fd)
            self.acked += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()
        os.close(self._fd)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# -- the loop -------------------------------------------------------------------------------------


def _clock_offset(steps: list[tuple[float, int, float]], agent: int, elapsed: float) -> float:
    return sum(delta for at, who, delta in steps if who == agent and at <= elapsed)


def _resume_index(outcomes: Path) -> int:
    """The first call this agent has not reported (a torn last line is a call not reported)."""
    last = -1
    if outcomes.exists():
        for line in outcomes.read_bytes().splitlines():
            try:
                last = max(last, int(json.loads(line)["i"]))
            except (ValueError, KeyError):
                continue
    return last + 1


def _wait_for_go(home: Path) -> tuple[float, float]:
    """Every agent starts the clock together: the harness writes ``go`` once all are ready."""
    go = home / "go"
    while True:
        try:
            times = json.loads(go.read_text())
            return float(times["t0"]), float(times["until"])
        except (OSError, ValueError):
            time.sleep(0.05)


class Agent:
    def __init__(self, args: argparse.Namespace) -> None:
        home = Path(args.home)
        self.index: int = args.index
        self.seed: int = args.seed
        self.interval = 1.0 / args.rate
        self.dir = home / "agents" / str(self.index)
        schedule = json.loads((home / "schedule.json").read_text())
        self.steps = [(f["at"], f["agent"], f["delta"]) for f in schedule if f["kind"] == "clock"]
        self.phase = Phase(self.dir / "phase")
        self.clock = ManualClock(start=time.time())
        self.exporter = AckingExporter(args.otlp, self.dir / "acked.txt")
        self.handle = telemetry.configure(
            service_name=f"soak-agent-{self.index}",
            trail_dir=self.dir / "trail",
            trail_max_bytes=4 * 1024 * 1024,
            span_exporter=self.exporter,
            metrics=False,
            masking_key=MASKING_KEY,
            use_global_provider=False,
            mask_logs=False,
        )
        self.stores: Any
        if args.store == "redis":
            from guard.stores.redis import open_redis_stores

            self.stores = open_redis_stores(args.redis_url, prefix="soak:")
        else:
            self.stores = open_sqlite_stores(home / "guard.db", busy_timeout=30.0)
        self.guard = Guard(
            tools=TOOLS,
            policy=POLICY,
            idempotency=self.stores.idempotency,
            approvals=self.stores.approvals,
            counters=self.stores.counters,
            clock=self.clock,
            observer=self.handle.observer,
            deps=Deps(ledger=Ledger(home / "ledger.db", self.index, self.phase)),
        )
        self.outcomes = self.dir / "outcomes.jsonl"
        self.next = _resume_index(self.outcomes)
        self._log = os.open(self.outcomes, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.calls = 0
        self._offset = 0.0
        (self.dir / "ready").touch()
        self.t0, self.until = _wait_for_go(home)

    def _tick(self) -> None:
        """The manual clock follows real time plus this agent's scheduled steps; it goes back only
        when a step says so (a backoff may have put it ahead of real time)."""
        offset = _clock_offset(self.steps, self.index, time.time() - self.t0)
        move = time.time() + offset - self.clock.now()
        if move > 0 or offset != self._offset:
            self.clock.advance(move)
        self._offset = offset

    def _execute(self, planned: Planned) -> ToolResult:
        session = self.guard.session(planned.session, PRINCIPAL)
        deadline = time.monotonic() + CLAIM_LEASE + 10.0
        while True:  # a twin (or our own killed incarnation) holds the key: wait it out
            self._tick()
            result = session.execute(planned.tool, planned.arguments, call_id=f"c{self.next}")
            if str(result.code) != "IN_PROGRESS" or time.monotonic() > deadline:
                return result
            time.sleep(0.1)

    def _decide(self, planned: Planned, pending: ToolResult) -> ToolResult | str:
        assert pending.approval_id is not None
        self._tick()
        try:
            if planned.decision == "approve":
                return self.guard.approve(pending.approval_id, by="soak-human")
            return self.guard.deny(pending.approval_id, by="soak-human")
        except GuardError as error:  # decided by an incarnation killed before it reported
            return type(error).__name__

    def _report(self, planned: Planned, result: ToolResult | str, first: ToolResult) -> None:
        record: dict[str, Any] = {"i": self.next, "t": planned.tool, "s": planned.session}
        if isinstance(result, str):
            record.update(code=result, outcome="", key=None, ok=False, replayed=False)
        else:
            record.update(
                code=str(result.code),
                outcome=str(result.outcome),
                key=result.idempotency_key,
                ok=result.ok,
                replayed=result.replayed,
            )
        record["first_key"] = first.idempotency_key
        os.write(self._log, (json.dumps(record) + "\n").encode())
        os.fsync(self._log)

    def run(self) -> None:
        started = time.monotonic()
        while time.time() < self.until:
            planned = plan(self.seed, self.index, self.next)
            self.phase.set(PHASE_GUARD, self.next)
            first = self._execute(planned)
            result: ToolResult | str = first
            if first.approval_id is not None and str(first.code) == "CONFIRMATION_REQUIRED":
                result = self._decide(planned, first)
            self.phase.set(PHASE_IDLE)
            self._report(planned, result, first)
            if isinstance(result, ToolResult) and result.outcome is Outcome.UNKNOWN:
                # The model asks again; the guard's status check settles the outcome.
                self.phase.set(PHASE_GUARD, self.next)
                again: ToolResult | str = (
                    self._decide(planned, first) if planned.decision else self._execute(planned)
                )
                self.phase.set(PHASE_IDLE)
                self._report(planned, again, first)
            self.next += 1
            self.calls += 1
            pause = started + self.calls * self.interval - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def close(self) -> None:
        self.handle.shutdown(15.0)
        trail = self.handle.trail
        stats = {
            "pid": os.getpid(),
            "calls": self.calls,
            "trail_spans": trail.spans if trail is not None else 0,
            "trail_lost_spans": self.handle.trail_lost_spans,
            "dropped_spans": self.handle.dropped_spans,
            "acked_spans": self.exporter.acked,
        }
        self.stores.close()
        (self.dir / f"stats-{os.getpid()}.json").write_text(json.dumps(stats))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--otlp", required=True, help="the sidecar's OTLP/HTTP traces URL")
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    parser.add_argument("--redis-url", default="")
    args = parser.parse_args(argv)
    agent = Agent(args)
    try:
        agent.run()
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
