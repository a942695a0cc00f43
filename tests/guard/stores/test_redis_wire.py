"""How the Redis stores use the wire: round trips per guard call, scripts the server forgot,
connections the server closed, writes sent without waiting, and servers that keep nothing."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pydantic import BaseModel, ConfigDict
from redis.connection import Connection

from guard import (
    ConfigurationError,
    Effect,
    Guard,
    Policy,
    Principal,
    Risk,
    RolePolicy,
    ToolContext,
    tool,
)
from guard.shop import Order, ShopApp, build_shop
from guard.stores import ClaimState
from guard.stores.redis import RedisStores, open_redis_stores

ROLE = "clerk"
CLERK = Principal(id="CUS-1", role=ROLE, scopes=frozenset({"orders:read", "refunds:write"}))
READ = '{"order_id": "ORD-7777"}'


class CountingConnection(Connection):
    """A real connection that notes each send and each reply read, in order."""

    events: list[str]  # set per pool by the fixture: one list for every connection of the client

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.events.append("send")
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        self.events.append("read")
        return super().read_response(*args, **kwargs)


def round_trips(events: list[str]) -> int:
    """Sends the client waited on: each send followed by a read before the next send."""
    return sum(
        1 for a, b in zip(events, [*events[1:], "end"], strict=True) if (a, b) == ("send", "read")
    )


@pytest.fixture
def counted(redis_url: str, redis_client: redis.Redis) -> Iterator[tuple[RedisStores, list[str]]]:
    """The Redis stores on a client whose every command is noted; the events list."""
    events: list[str] = []
    connection = type("Counted", (CountingConnection,), {"events": events})
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=connection)
    client = redis.Redis(connection_pool=pool)
    stores = open_redis_stores(client)
    try:
        yield stores, events
    finally:
        stores.close()
        client.close()


def shop_on(stores: RedisStores) -> ShopApp:
    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**9, currency="BRL")
    policy = Policy(
        roles={ROLE: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
    )
    return build_shop(
        orders=[big],
        policy=policy,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
    )


def refund(cents: int) -> str:
    return f'{{"order_id": "ORD-7777", "amount_cents": {cents}, "currency": "BRL", "reason": "damaged"}}'


class TestRoundTrips:
    """What a guard call waits for on Redis, counted on the connection, not timed."""

    def test_a_read_waits_once(self, counted: tuple[RedisStores, list[str]]) -> None:
        """A shop read: the budget's ceilings and the loop counter in one script
        (``guard.batching``); a re-read within a minute writes no mark again
        (``guard.stages.marks``), and the first read's marks rode unawaited with it."""
        stores, events = counted
        session = shop_on(stores).guard.session("s1", CLERK)
        assert session.execute("get_order", READ).ok
        events.clear()
        assert session.execute("get_order", READ).ok
        assert round_trips(events) == 1
        assert events.count("send") == 1  # one command, no mark repeated

    def test_propose_and_approve_wait_four_times(
        self, counted: tuple[RedisStores, list[str]]
    ) -> None:
        """A refund proposed (2 waits: the counts with the marks the rules and policy read and
        the claim after them, in one script; the pending action filed) and approved (2: the
        action read for its seal; the decision with the claim after it, in one script, the
        marks read ahead riding along) runs once; results, marks and the release unawaited."""
        stores, events = counted
        shop = shop_on(stores)
        session = shop.guard.session("s1", CLERK)
        assert session.execute("get_order", READ).ok
        events.clear()
        pending = session.execute("refund_order", refund(500))
        assert pending.approval_id is not None
        proposed = round_trips(events)
        events.clear()
        assert shop.guard.approve(pending.approval_id, by="alice").ok
        assert (proposed, round_trips(events)) == (2, 2)
        assert shop.backend.side_effects == 1

    def test_a_write_no_human_confirms_waits_once(
        self, counted: tuple[RedisStores, list[str]]
    ) -> None:
        """A low-risk write: its counts and its claim in one script, the result recorded
        unawaited, so it waits once; its repeat waits once too and replays."""
        stores, events = counted
        notes: list[str] = []

        class Note(BaseModel):
            model_config = ConfigDict(extra="forbid")
            text: str

        @tool(arguments=Note, effect=Effect.WRITE, risk=Risk.LOW)
        def add_note(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Add a note."""
            notes.append(args.text)
            return {"added": args.text}

        guard = Guard(
            tools=[add_note],
            policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"add_note"}))}),
            idempotency=stores.idempotency,
            approvals=stores.approvals,
            counters=stores.counters,
        )
        session = guard.session("s1", Principal(id="U1", role="agent"))
        waits = []
        for _ in range(2):
            events.clear()
            result = session.execute("add_note", '{"text": "call back"}')
            assert result.ok
            waits.append(round_trips(events))
        assert waits == [1, 1] and result.replayed
        assert notes == ["call back"]

    def test_every_command_is_answered_before_close_returns(
        self, counted: tuple[RedisStores, list[str]], redis_client: redis.Redis
    ) -> None:
        """close() reads the replies of writes sent unawaited: another client sees them all."""
        stores, events = counted
        stores.idempotency.claim("k", "f", now=0.0, lease=60.0)
        stores.idempotency.complete("k", "f", '"done"', now=0.0, ttl=60.0)
        assert events[-1] == "send"
        stores.close()
        assert redis_client.hget("callgate:idem:k", "result") == b'"done"'

    def test_reads_ahead_arrive_with_the_next_command(
        self, counted: tuple[RedisStores, list[str]]
    ) -> None:
        """``ahead`` waits for nothing; its values are there once the next command is answered."""
        stores, events = counted
        stores.counters.incr("a", 5, now=0.0, ttl=60.0)
        events.clear()
        found = stores.counters.ahead(["a", "absent"], now=1.0)
        assert (found, events) == ({}, ["send"])
        assert stores.counters.get("a", now=1.0) == 5
        assert found == {"a": 5, "absent": 0} and round_trips(events) == 1


class TestWire:
    """The connection each thread keeps: scripts, restarts, late errors."""

    def test_a_flushed_script_cache_is_refilled(self, redis_client: redis.Redis) -> None:
        """After SCRIPT FLUSH (a restarted server) a script still runs, exactly once."""
        stores = open_redis_stores(redis_client)
        assert stores.counters.incr("c", now=0.0, ttl=60.0) == 1
        redis_client.script_flush()
        assert stores.counters.incr("c", now=0.0, ttl=60.0) == 2
        assert stores.counters.get("c", now=0.0) == 2

    def test_a_connection_the_server_closed_while_idle_is_reopened(
        self, redis_url: str, redis_client: redis.Redis
    ) -> None:
        """A server that dropped the idle connection (a restart, a timeout) costs no call."""
        with open_redis_stores(redis_url) as stores:
            assert stores.counters.incr("c", now=0.0, ttl=60.0) == 1
            redis_client.client_kill_filter(_type="normal", skipme=True)
            assert stores.counters.incr("c", now=0.0, ttl=60.0) == 2

    def test_a_refused_unawaited_write_is_logged_and_the_next_call_answered(
        self, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A write the server refuses after the caller moved on is logged; later reads work."""
        stores = open_redis_stores(redis_client)
        stores.idempotency.claim("k", "f", now=0.0, lease=60.0)
        redis_client.config_set("maxmemory", 1)  # noeviction: every write is refused
        try:
            with caplog.at_level(logging.ERROR, logger="guard"):
                stores.idempotency.complete("k", "f", '"done"', now=0.0, ttl=60.0)
                claim = stores.idempotency.claim("k", "f", now=1.0, lease=60.0)
        finally:
            redis_client.config_set("maxmemory", 0)
        assert claim.state is ClaimState.IN_FLIGHT  # the claim stands: a repeat is refused
        assert "sent earlier failed" in caplog.text

    def test_each_thread_has_its_own_connection(self, redis_client: redis.Redis) -> None:
        """Threads never read each other's replies: each counts its own increments exactly."""
        stores = open_redis_stores(redis_client)
        results: dict[int, list[int]] = {}

        def count(i: int) -> None:
            results[i] = [stores.counters.incr(f"c{i}", now=0.0, ttl=60.0) for _ in range(200)]
            stores.counters.reset(f"c{i}")  # unawaited, then a read on the same connection
            results[i].append(stores.counters.get(f"c{i}", now=0.0))

        threads = [threading.Thread(target=count, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert all(results[i] == [*range(1, 201), 0] for i in range(4))


class TestPersistence:
    """A server that keeps nothing across a restart would forget keys, approvals and limits."""

    @pytest.fixture
    def volatile(self, redis_client: redis.Redis) -> Iterator[redis.Redis]:
        saved = redis_client.config_get("save")["save"]
        redis_client.config_set("save", "")
        try:
            yield redis_client
        finally:
            redis_client.config_set("save", saved)

    def test_a_server_without_aof_or_rdb_is_refused(self, volatile: redis.Redis) -> None:
        """open_redis_stores raises ConfigurationError naming the settings to change."""
        with pytest.raises(ConfigurationError, match="appendonly yes") as refused:
            open_redis_stores(volatile)
        assert "allow_volatile=True" in str(refused.value)

    def test_allow_volatile_opens_it(self, volatile: redis.Redis) -> None:
        """Tests and caches opt out explicitly."""
        stores = open_redis_stores(volatile, allow_volatile=True)
        assert stores.counters.incr("c", now=0.0, ttl=60.0) == 1
        stores.close()

    @pytest.mark.parametrize("setting", [("appendonly", "yes"), ("save", "3600 1")])
    def test_either_kind_of_persistence_is_accepted(
        self, volatile: redis.Redis, setting: tuple[str, str]
    ) -> None:
        """An append-only file or an RDB schedule alone is enough."""
        name, value = setting
        volatile.config_set(name, value)
        try:
            open_redis_stores(volatile).close()
        finally:
            volatile.config_set("appendonly", "no")
