"""A process killed with SIGKILL in the middle of a write never makes the write run twice.

A worker process sends a payment through the guard, on a durable store (a SQLite file, or a real
redis-server); the handler applies the payment (one line in a file) and then hangs, and the test
kills the process with SIGKILL. The claim it held stays in the store with no result. Once its lease
has passed, the same call from a new process must not run blindly a second time when the payment
backend cannot deduplicate: it ends TIMEOUT with outcome unknown and the key, and so does every
repeat. A backend that honours the key may be retried, under the same key.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import Effect, Guard, Policy, Principal, Risk, RolePolicy, ToolContext, tool
from guard.stores import open_sqlite_stores
from guard.stores.redis import open_redis_stores
from guard.testing import ManualClock
from tests.guard.stores.conftest import backdate_leases

START = 1_767_225_600.0
ARGS = '{"invoice": "INV-7", "amount_cents": 500}'
USER = Principal(id="OPS-1", role="ops")
POLICY = Policy(
    roles={"ops": RolePolicy(tools=frozenset({"pay"}))}, rate_limit=None, max_identical_calls=100
)


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")
    invoice: str
    amount_cents: int


def open_stores(where: str) -> Any:
    if where.startswith("redis://"):
        return open_redis_stores(where, prefix="crash:")
    return open_sqlite_stores(where)


def payment_guard(where: str, effects: Path, *, dedupes: bool, hang: bool, now: float) -> Any:
    """A guard whose one write appends a line per payment applied, then optionally hangs."""

    @tool(arguments=Payment, effect=Effect.WRITE, risk=Risk.LOW, idempotent_backend=dedupes)
    def pay(args: Payment, ctx: ToolContext) -> dict[str, str]:
        """Pay an invoice."""
        with open(effects, "a") as handle:
            handle.write(f"{os.getpid()} {ctx.idempotency_key}\n")
            handle.flush()
            os.fsync(handle.fileno())
        while hang:  # applied, not answered: the process dies here
            time.sleep(0.05)
        return {"paid": args.invoice}

    stores = open_stores(where)
    guard = Guard(
        tools=[pay],
        policy=POLICY,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
        clock=ManualClock(now),
    )
    return guard, stores


def pay_and_hang(where: str, effects: str, dedupes: bool) -> None:
    """The worker: sends the payment and hangs inside the handler until killed."""
    guard, _ = payment_guard(where, Path(effects), dedupes=dedupes, hang=True, now=START)
    guard.session("s1", USER).execute("pay", ARGS)


def propose_again(
    where: str, effects: str, dedupes: bool, session_id: str, now: float, answers: Any
) -> None:
    """A restarted host: a new process, a new session id, the same user's same call."""
    guard, stores = payment_guard(where, Path(effects), dedupes=dedupes, hang=False, now=now)
    result = guard.session(session_id, USER).execute("pay", ARGS)
    answers.put((str(result.code), str(result.outcome), result.idempotency_key, result.replayed))
    stores.close()


def in_new_process(where: str, effects: Path, *, dedupes: bool, now: float) -> tuple[Any, ...]:
    """Run ``propose_again`` in a freshly spawned process under a session id of its own."""
    context = multiprocessing.get_context("spawn")
    answers = context.Queue()
    session_id = f"restarted-{os.urandom(8).hex()}"
    worker = context.Process(
        target=propose_again, args=(where, str(effects), dedupes, session_id, now, answers)
    )
    worker.start()
    answer: tuple[Any, ...] = answers.get(timeout=60)
    worker.join(timeout=30)
    assert worker.exitcode == 0
    return answer


def killed_mid_write(where: str, effects: Path, *, dedupes: bool) -> None:
    """Run the worker until it has applied the payment, then SIGKILL it."""
    context = multiprocessing.get_context("spawn")
    worker = context.Process(target=pay_and_hang, args=(where, str(effects), dedupes))
    worker.start()
    deadline = time.monotonic() + 60
    while not (effects.exists() and effects.read_text().strip()):
        assert worker.is_alive() and time.monotonic() < deadline, "the worker never paid"
        time.sleep(0.02)
    assert worker.pid is not None
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(timeout=30)
    assert worker.exitcode == -signal.SIGKILL


def elapse(where: str, seconds: float) -> None:
    """Let ``seconds`` pass on the store's lease clock (the host's, or the Redis server's TIME,
    neither of which a test can move): every claim's stamp is moved back by that much."""
    if where.startswith("redis://"):
        import redis

        client = redis.Redis.from_url(where)
        try:
            backdate_leases(client, seconds)
        finally:
            client.close()
        return
    with closing(sqlite3.connect(where)) as conn, conn:
        conn.execute("UPDATE idempotency SET leased_at = leased_at - ?", (seconds,))


def payments(effects: Path) -> list[str]:
    return effects.read_text().splitlines()


@pytest.fixture(params=["sqlite", "redis"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where the stores live: a SQLite file, or a real redis-server (flushed for the test)."""
    if request.param == "sqlite":
        yield str(tmp_path / "guard.db")
        return
    client = request.getfixturevalue("redis_client")
    yield request.getfixturevalue("redis_url")
    client.flushdb()


class TestKilledMidWrite:
    def test_a_write_the_backend_cannot_dedupe_never_runs_twice(
        self, where: str, tmp_path: Path
    ) -> None:
        """After SIGKILL mid-handler: IN_PROGRESS within the lease, TIMEOUT/unknown after it,
        replayed on every repeat, and one payment in all."""
        effects = tmp_path / "payments.log"
        killed_mid_write(where, effects, dedupes=False)
        assert len(payments(effects)) == 1
        key = payments(effects)[0].split()[1]

        soon, _ = payment_guard(where, effects, dedupes=False, hang=False, now=START + 1)
        held = soon.session("s1", USER).execute("pay", ARGS)
        assert held.code == "IN_PROGRESS" and len(payments(effects)) == 1

        late = START + POLICY.claim_lease + 1
        elapse(where, POLICY.claim_lease + 1)
        guard, stores = payment_guard(where, effects, dedupes=False, hang=False, now=late)
        after = guard.session("s1", USER).execute("pay", ARGS)
        assert after.code == "TIMEOUT" and after.outcome == "unknown" and not after.ok
        assert after.idempotency_key == key and key in after.message
        assert stores.idempotency.purge(late + 3600) == 0  # the unknown outcome is kept
        again, _ = payment_guard(where, effects, dedupes=False, hang=False, now=late + 3600)
        repeat = again.session("s1", USER).execute("pay", ARGS)
        assert repeat.code == "TIMEOUT" and repeat.replayed and repeat.outcome == "unknown"
        assert len(payments(effects)) == 1

    def test_a_write_the_backend_dedupes_is_retried_under_the_same_key(
        self, where: str, tmp_path: Path
    ) -> None:
        """When the backend honours the key, the stale claim is taken over and the retry carries
        the same key, which the backend recognises (one payment there)."""
        effects = tmp_path / "payments.log"
        killed_mid_write(where, effects, dedupes=True)
        late = START + POLICY.claim_lease + 1
        elapse(where, POLICY.claim_lease + 1)
        guard, _ = payment_guard(where, effects, dedupes=True, hang=False, now=late)
        result = guard.session("s1", USER).execute("pay", ARGS)
        assert result.ok
        keys = [line.split()[1] for line in payments(effects)]
        assert len(keys) == 2 and len(set(keys)) == 1


class TestRestartedHost:
    """The host itself restarts (a stdio gateway, a worker pool): new processes, new session
    ids. The in-flight lock is the user's (``guard.stages.idempotency.actor``), so the lock of the
    killed process still holds the call."""

    def test_a_new_process_with_a_new_session_never_runs_the_write_again(
        self, where: str, tmp_path: Path
    ) -> None:
        """SIGKILL mid-write; a new process under a new session id proposes the same call:
        IN_PROGRESS within the lease, then TIMEOUT/unknown with the killed attempt's key, and
        replayed by a third process; one payment in all."""
        effects = tmp_path / "payments.log"
        killed_mid_write(where, effects, dedupes=False)
        key = payments(effects)[0].split()[1]
        held = in_new_process(where, effects, dedupes=False, now=START + 1)
        assert held[:3] == ("IN_PROGRESS", "unknown", key)
        late = START + POLICY.claim_lease + 1
        elapse(where, POLICY.claim_lease + 1)
        after = in_new_process(where, effects, dedupes=False, now=late)
        assert after == ("TIMEOUT", "unknown", key, False)
        again = in_new_process(where, effects, dedupes=False, now=late + 60)
        assert again == ("TIMEOUT", "unknown", key, True)
        assert len(payments(effects)) == 1

    def test_a_backend_that_dedupes_gets_the_same_key_from_the_new_process(
        self, where: str, tmp_path: Path
    ) -> None:
        """The stale lock is taken over under the killed attempt's key, so the backend sees one
        payment; once that write completed, a later conversation is a new one and runs its own
        (replays are per session), under a key of its own."""
        effects = tmp_path / "payments.log"
        killed_mid_write(where, effects, dedupes=True)
        late = START + POLICY.claim_lease + 1
        elapse(where, POLICY.claim_lease + 1)
        retried = in_new_process(where, effects, dedupes=True, now=late)
        assert retried[0] == "OK"
        keys = [line.split()[1] for line in payments(effects)]
        assert len(keys) == 2 and set(keys) == {retried[2]}
        later = in_new_process(where, effects, dedupes=True, now=late + 60)
        assert later[0] == "OK" and later[3] is False and later[2] != retried[2]
        assert len(payments(effects)) == 3


class TestActors:
    def test_anonymous_sessions_are_separate_actors(self, tmp_path: Path) -> None:
        """Anonymous principals share an id: their writes stay keyed by session, so one
        stranger's write never replays into another's conversation."""
        effects = tmp_path / "payments.log"
        guard, _ = payment_guard(
            str(tmp_path / "g.db"), effects, dedupes=False, hang=False, now=START
        )
        stranger = Principal.anonymous(role="ops")
        first = guard.session("a1", stranger).execute("pay", ARGS)
        second = guard.session("a2", stranger).execute("pay", ARGS)
        assert first.ok and second.ok and not second.replayed
        assert first.idempotency_key != second.idempotency_key
        assert len(payments(effects)) == 2

    def test_a_completed_write_is_not_replayed_into_another_conversation(
        self, tmp_path: Path
    ) -> None:
        """Replays are the conversation's: the same user's same write from another session,
        after the first completed, runs under a key of its own; a repeat in either replays."""
        effects = tmp_path / "payments.log"
        guard, _ = payment_guard(
            str(tmp_path / "g.db"), effects, dedupes=False, hang=False, now=START
        )
        first = guard.session("s1", USER).execute("pay", ARGS)
        second = guard.session("s2", USER).execute("pay", ARGS)
        assert first.ok and second.ok and not second.replayed
        assert first.idempotency_key != second.idempotency_key
        assert guard.session("s1", USER).execute("pay", ARGS).replayed
        assert guard.session("s2", USER).execute("pay", ARGS).replayed
        assert len(payments(effects)) == 2
