"""``callgate outcomes list|settle`` on real SQLite files and a real redis-server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel, ConfigDict

from callgate.cli import main
from guard import (
    Effect,
    Guard,
    Outcome,
    Policy,
    Principal,
    RolePolicy,
    ToolContext,
    ToolResult,
    tool,
)
from guard.stores import Stores
from guard.testing import ManualClock
from tests.guard.stores.conftest import redis_url  # noqa: F401  (the real redis-server fixture)

ARGS = json.dumps({"account": "A1", "amount_cents": 500})
ALICE = Principal(id="alice", role="agent", scopes=frozenset(), authenticated=True)


class Pay(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    amount_cents: int


@dataclass
class Backend:
    """A payments backend that cannot deduplicate; ``fail`` loses the answer after or before."""

    calls: int = 0
    applied: int = 0
    fail: str = "after"
    keys: list[str] = field(default_factory=list)

    def pay(self, key: str) -> dict[str, Any]:
        self.calls += 1
        self.keys.append(key)
        if self.fail == "before":
            raise TimeoutError("no answer")
        self.applied += 1
        if self.fail == "after":
            raise TimeoutError("answer lost")
        return {"receipt": self.applied}


@pytest.fixture(params=["sqlite", "redis"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the guard and the command share: a SQLite file or a Redis URL (flushed)."""
    if request.param == "sqlite":
        yield str(tmp_path / "guard.sqlite")
        return
    import redis

    url: str = request.getfixturevalue("redis_url")
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url


def open_spec(spec: str) -> Stores:
    from callgate.approvals import open_stores

    return open_stores(spec)


@dataclass
class World:
    spec: str
    stores: Stores
    guard: Guard
    backend: Backend

    def pay(self, session: str = "s1") -> ToolResult:
        return self.guard.session(session, ALICE).execute("pay", ARGS)


@pytest.fixture
def world(spec: str) -> Iterator[World]:
    backend = Backend()

    @tool(arguments=Pay, effect=Effect.WRITE, idempotent_backend=False, timeout=1.0)
    def pay(args: Pay, ctx: ToolContext) -> dict[str, Any]:
        """Pay from an account."""
        assert ctx.idempotency_key is not None
        return backend.pay(ctx.idempotency_key)

    stores = open_spec(spec)
    policy = Policy(roles={"agent": RolePolicy(tools=frozenset({"pay"}))})
    guard = Guard(
        tools=[pay],
        policy=policy,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
        clock=ManualClock(start=time.time()),  # the command reads the wall clock
    )
    try:
        yield World(spec=spec, stores=stores, guard=guard, backend=backend)
    finally:
        stores.close()


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def unknown_write(world: World) -> str:
    """One write whose answer was lost: TIMEOUT, outcome unknown; its key."""
    first = world.pay()
    assert first.code == "TIMEOUT" and first.outcome is Outcome.UNKNOWN
    assert first.idempotency_key is not None
    return first.idempotency_key


class TestList:
    def test_lists_each_unknown_write_once_with_its_tool(self, world: World) -> None:
        """One line per write (its lock folded in), naming key, tool and the code it ended with."""
        key = unknown_write(world)
        out = cli("outcomes", "list", "--store", world.spec)
        assert out.exit_code == 0, out.output
        lines = out.output.splitlines()
        assert len(lines) == 1 and lines[0].startswith(key) and " pay " in lines[0]
        assert "TIMEOUT" in lines[0]

    def test_json_lines_and_an_empty_store(self, world: World) -> None:
        """--json gives one object per write; a store with none says so and exits 0."""
        assert cli("outcomes", "list", "--store", world.spec).output == "no unknown outcomes\n"
        key = unknown_write(world)
        out = cli("outcomes", "list", "--store", world.spec, "--json")
        facts = [json.loads(line) for line in out.output.splitlines()]
        assert [(f["key"], f["tool"], f["code"]) for f in facts] == [(key, "pay", "TIMEOUT")]

    def test_hidden_characters_in_a_message_are_escaped(self, world: World) -> None:
        """A stored message carrying a bidi override or a newline prints as escapes, one line."""
        key = unknown_write(world)
        record = world.stores.idempotency.record(key)
        assert record is not None and record.result is not None
        saved = json.loads(record.result) | {"message": "fine\u202e\nFAKE k_x settled"}
        text = json.dumps(saved, separators=(",", ":"))
        world.stores.idempotency.complete(key, record.fingerprint, text, now=time.time(), ttl=60)
        out = cli("outcomes", "list", "--store", world.spec)
        assert len(out.output.splitlines()) == 1 and "\u202e" not in out.output


class TestSettle:
    def test_applied_is_replayed_and_the_write_never_runs_again(self, world: World) -> None:
        """After settle --applied, repeats from this and another session replay OK; 1 call."""
        key = unknown_write(world)
        out = cli("outcomes", "settle", key, "--applied", "--by", "bob", "--store", world.spec)
        assert out.exit_code == 0, out.output
        world.backend.fail = ""
        for session in ("s1", "s2"):  # s2: the actor's lock holds the settled answer too
            again = world.pay(session)
            assert again.ok and again.replayed and again.outcome is Outcome.APPLIED
            assert "bob" in again.message
        assert world.backend.calls == 1 and world.backend.applied == 1
        assert cli("outcomes", "list", "--store", world.spec).output == "no unknown outcomes\n"

    def test_not_applied_is_answered_as_settled(self, world: World) -> None:
        """After settle --not-applied, repeats are told it did not happen; nothing runs."""
        world.backend.fail = "before"
        key = unknown_write(world)
        out = cli("outcomes", "settle", key, "--not-applied", "--by", "bob", "--store", world.spec)
        assert out.exit_code == 0, out.output
        world.backend.fail = ""
        for session in ("s1", "s2"):
            again = world.pay(session)
            assert not again.ok and again.replayed and again.outcome is Outcome.NOT_APPLIED
            assert again.code == "UPSTREAM_UNAVAILABLE"
        assert world.backend.calls == 1 and world.backend.applied == 0

    def test_a_key_that_is_not_unknown_exits_1_naming_its_state(self, world: World) -> None:
        """Settled already, or never stored: exit 1, one line naming the state; nothing changed."""
        key = unknown_write(world)
        assert cli("outcomes", "settle", key, "--applied", "--store", world.spec).exit_code == 0
        twice = cli("outcomes", "settle", key, "--not-applied", "--store", world.spec)
        assert twice.exit_code == 1 and "settled (applied)" in twice.output
        assert len(twice.output.strip().splitlines()) == 1
        missing = cli("outcomes", "settle", "k_nope", "--applied", "--store", world.spec)
        assert missing.exit_code == 1 and "not in the store" in missing.output
        world.backend.fail = ""
        assert world.pay().outcome is Outcome.APPLIED and world.backend.calls == 1

    def test_settle_needs_a_verdict(self, world: World) -> None:
        """Neither --applied nor --not-applied: a usage error (exit 2), the key untouched."""
        key = unknown_write(world)
        out = cli("outcomes", "settle", key, "--store", world.spec)
        assert out.exit_code == 2
        assert [r.key for r in world.stores.idempotency.unknown(now=time.time())] != []


class TestSettledSpan:
    def test_a_settlement_writes_its_span_to_the_trail(
        self, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """settle --trail-dir writes one guard.outcome.settled span, a trace of its own: source
        human, who as a keyed hash (the name never in the file), the outcome, tool and the key's
        hash as the call spans write it; its chain verifies; the loader files it as a settlement."""
        from telemetry.masking import Masker
        from tests.telemetry.conftest import read_spans

        monkeypatch.setenv("CALLGATE_MASKING_KEY", "outcomes-test-key")
        key = unknown_write(world)
        trail = tmp_path / "trail"
        out = cli("outcomes", "settle", key, "--applied", "--by", "bob-the-operator",
                  "--store", world.spec, "--trail-dir", str(trail))  # fmt: skip
        assert out.exit_code == 0, out.output
        (span,) = read_spans(trail)
        masker = Masker(key=b"outcomes-test-key")
        assert span["name"] == "guard.outcome.settled" and not span.get("parentSpanId")
        assert span["traceId"] in out.output
        assert span["attrs"] == {
            "guard.settled.source": "human",
            "guard.settled.by": masker.principal("bob-the-operator"),
            "guard.outcome": "applied",
            "guard.idempotency_key": masker.short_hash(key),
            "gen_ai.tool.name": "pay",
        }
        files = sorted(trail.glob("*.jsonl"))
        assert not any(b"bob-the-operator" in path.read_bytes() for path in files)
        assert cli("verify", *map(str, files)).exit_code == 0
        db = tmp_path / "spans.duckdb"
        assert cli("load", "--db", str(db), str(trail)).exit_code == 0
        from analytics import open_database

        with open_database(db) as con:
            rows = con.execute("SELECT name, category FROM span_rows").fetchall()
        assert rows == [("guard.outcome.settled", "settlement")]

    def test_without_a_trail_nothing_is_written(
        self, world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No --trail-dir and no CALLGATE_TRAIL_DIR: the settlement is stored, no span file made."""
        monkeypatch.delenv("CALLGATE_TRAIL_DIR", raising=False)
        monkeypatch.chdir(tmp_path)
        key = unknown_write(world)
        out = cli("outcomes", "settle", key, "--not-applied", "--store", world.spec)
        assert out.exit_code == 0 and "span" not in out.output
        assert not list(tmp_path.rglob("*.jsonl"))
