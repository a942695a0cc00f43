"""One soak agent process: a seeded stream of tool calls through the guard, for ``bench/soak.py``.

Run by the harness, never by hand::

    python bench/soak_agent.py --home DIR --index 0 --seed 7 --otlp URL ...

The domain (backend, ledger, tools, the calls) is ``bench/soak_domain.py``. After an ``unknown``
outcome the agent sends the call again, and the guard settles it with the tool's status check.

Every call's reported outcome is appended to ``outcomes.jsonl`` and fsynced before the next call,
so a SIGKILL loses at most the call in flight. A restarted agent resumes at the first call it did
not report and sends it again, as a model whose answer was lost would. ``phase`` (16 bytes, mmap)
tells the harness where the agent is, so it can kill it mid-call: 1 in the guard, 2 in the
handler with the effect written but not committed, 3 committed and not yet answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from soak_domain import (
    CLAIM_LEASE,
    MASKING_KEY,
    PHASE_GUARD,
    PHASE_IDLE,
    PHASE_PENDING,
    POLICY,
    PRINCIPAL,
    TOOLS,
    Deps,
    Ledger,
    Phase,
    Planned,
    plan,
)

import telemetry
from guard import Guard, GuardError, Outcome, ToolResult
from guard.stores import open_sqlite_stores
from guard.testing import ManualClock

__all__ = ["MASKING_KEY", "main"]

# -- the span exporter that remembers what the sidecar acknowledged ------------------------------


class AckingExporter(SpanExporter):
    """OTLP/HTTP to the sidecar; the ids of every batch it acknowledged go to a fsynced file, with
    the pid of the process that sent them."""

    def __init__(self, endpoint: str, acked: Path) -> None:
        self._inner = OTLPSpanExporter(endpoint=endpoint, timeout=3)
        self._fd = os.open(acked, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.acked = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        if result is SpanExportResult.SUCCESS:
            pid = os.getpid()  # the incarnation: its trail's copies are checked against these
            lines = "".join(
                f"{s.context.trace_id:032x} {s.context.span_id:016x} {pid}\n"
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

            # --redis-volatile shows what a server without persistence loses: opened knowingly.
            volatile = args.redis_volatile == "yes"
            self.stores = open_redis_stores(args.redis_url, prefix="soak:", allow_volatile=volatile)
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
            # Agents approve each other's pending actions: they share the deployment's key.
            approval_key=MASKING_KEY,
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

    def _hold(self, approval_id: str) -> None:
        """The human reads the question: the approval is pending and undecided, its id on disk.
        While the harness asks for it (``<agent>/hold``, an ``approval_kill`` coming) the agent
        stays here until killed, so the kill lands in this moment however loaded the machine."""
        pending = self.dir / "pending.tmp"
        pending.write_text(approval_id)
        pending.replace(self.dir / "pending")
        self.phase.set(PHASE_PENDING, self.next)
        hold, deadline = self.dir / "hold", time.monotonic() + 60.0
        while hold.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        # Out of the pending phase before the human decides: a harness that touched ``hold`` just
        # after the check above, then killed this process, must not take a decision made here for
        # one still pending (it would approve an action this agent had denied).
        self.phase.set(PHASE_GUARD, self.next)

    def _run_decided(self) -> None:
        """An approval the harness decided while this agent's previous incarnation was dead
        (``approval_kill``): run it now, once, as a gateway runs at its start the approvals
        decided while none ran. Its answer is reported with the calls (``resumed``: true)."""
        decided = self.dir / "decided"
        if not decided.exists():
            return
        approval_id = decided.read_text().strip()
        self._tick()
        record: dict[str, Any] = {"t": "big_pay", "s": "", "approval_id": approval_id,
                                  "resumed": True, "pid": os.getpid()}  # fmt: skip
        try:
            result = self.guard.approve(approval_id, by="soak-operator")
        except GuardError as error:
            record.update(code=type(error).__name__, outcome="", key=None, ok=False)
        else:
            record.update(code=str(result.code), outcome=str(result.outcome),
                          key=result.idempotency_key, ok=result.ok, replayed=result.replayed)  # fmt: skip
        record["first_key"] = record["key"]
        os.write(self._log, (json.dumps(record) + "\n").encode())
        os.fsync(self._log)
        decided.unlink()

    def _decide(self, planned: Planned, pending: ToolResult) -> ToolResult | str:
        assert pending.approval_id is not None
        self._hold(pending.approval_id)
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
        self._run_decided()
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
    parser.add_argument("--redis-volatile", choices=("yes", "no"), default="no")
    args = parser.parse_args(argv)
    agent = Agent(args)
    try:
        agent.run()
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
