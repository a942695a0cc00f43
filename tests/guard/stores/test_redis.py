"""What only the Redis stores promise: several hosts and processes, keys that expire on their own."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
import redis

from guard import Code, ConfigurationError, Principal
from guard.stores import ApprovalState, ClaimState, PendingAction
from guard.stores._redis_lua import DEADLINE_PURGE
from guard.stores._rules import ABANDONED_RETENTION
from guard.stores.redis import (
    RedisApprovalStore,
    RedisCounterStore,
    RedisIdempotencyStore,
    open_redis_stores,
)
from tests.guard.stages.test_confirm_facts import PAYOUT, World, payout_guard
from tests.guard.stores.threads import run_together

KEYS = [f"key-{i}" for i in range(200)]


def _claim_keys(url: str, barrier: Barrier, results: multiprocessing.Queue[list[str]]) -> None:
    """Child process: open its own client, wait for the other, claim every key, report wins."""
    with open_redis_stores(url) as stores:
        stores.client.ping()  # connect before the barrier, so the race starts at once
        barrier.wait(timeout=30)
        claims = [(k, stores.idempotency.claim(k, "f", now=0.0, lease=60.0)) for k in KEYS]
    results.put([k for k, c in claims if c.state is ClaimState.CLAIMED])


def _add_within(url: str, barrier: Barrier, results: multiprocessing.Queue[int]) -> None:
    """Child process: race add_within on one counter and report how many adds succeeded."""
    with open_redis_stores(url) as stores:
        stores.client.ping()  # connect before the barrier, so the race starts at once
        barrier.wait(timeout=30)
        counters = stores.counters
        added = sum(counters.add_within("c", 1, 150, now=0.0, ttl=100.0) for _ in range(100))
    results.put(added)


def _race(target: Callable[..., None], url: str) -> list[Any]:
    """Run ``target`` in two spawned processes released together; collect what each reports."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results: multiprocessing.Queue[Any] = ctx.Queue()
    procs = [ctx.Process(target=target, args=(url, barrier, results)) for _ in range(2)]
    for proc in procs:
        proc.start()
    try:
        reports = [results.get(timeout=60) for _ in procs]
    finally:
        for proc in procs:
            proc.join(timeout=60)
            if proc.exitcode is None:  # hung: never leave a child for interpreter exit to wait on
                proc.kill()
                proc.join()
        results.close()
        results.join_thread()
    assert [proc.exitcode for proc in procs] == [0, 0]
    for proc in procs:
        proc.close()
    return reports


def action(**overrides: Any) -> PendingAction:
    fields: dict[str, Any] = {
        "id": "apr_1",
        "session_id": "s1",
        "principal_id": "u1",
        "role": "support",
        "scopes": ("refunds:write",),
        "tool": "refund",
        "arguments": '{"amount_cents":500}',
        "fingerprint": "fp",
        "proposal_key": "prop",
        "call_id": "c1",
        "reason": "CONFIRMATION_REQUIRED",
        "created_at": 0.0,
        "expires_at": 900.0,
    }
    return PendingAction(**(fields | overrides))


class TestHosts:
    def test_eight_clients_claiming_one_key_yield_one_owner(self, redis_url: str) -> None:
        """Eight threads, each with its own client (as eight hosts), claim one key: one wins."""
        clients = [redis.Redis.from_url(redis_url) for _ in range(8)]
        try:
            clients[0].flushdb()
            stores = [RedisIdempotencyStore(client) for client in clients]
            states = run_together(8, lambda i: stores[i].claim("k", "f", now=0.0, lease=60.0).state)
        finally:
            for client in clients:
                client.close()
        assert states.count(ClaimState.CLAIMED) == 1
        assert states.count(ClaimState.IN_FLIGHT) == 7

    def test_two_processes_claim_each_key_exactly_once(
        self, redis_url: str, redis_client: redis.Redis
    ) -> None:
        """Two spawned processes racing over the same keys never both claim a key."""
        wins = _race(_claim_keys, redis_url)
        assert sorted(key for won in wins for key in won) == sorted(KEYS)

    def test_two_processes_add_within_never_exceed_the_limit(
        self, redis_url: str, redis_client: redis.Redis
    ) -> None:
        """Two spawned processes racing add_within on one counter stop exactly at the limit."""
        assert sum(_race(_add_within, redis_url)) == 150
        assert RedisCounterStore(redis_client).get("c", now=0.0) == 150


class TestExpiry:
    def test_every_key_written_carries_a_ttl(self, redis_client: redis.Redis) -> None:
        """Redis itself bounds memory: no key is left without an expiry."""
        stores = open_redis_stores(redis_client)
        stores.idempotency.claim("claimed", "f", now=0.0, lease=60.0)
        stores.idempotency.complete("done", "f", "{}", now=0.0, ttl=60.0)
        stores.counters.incr("c", now=0.0, ttl=60.0)
        stores.counters.add_within("d", 1, 5, now=0.0, ttl=60.0)
        stores.approvals.create(action())
        stores.approvals.decide("apr_1", approve=True, by="alice", now=1.0)
        keys = redis_client.keys("*")
        assert len(keys) == 6
        assert all(redis_client.pttl(key) > 0 for key in keys)

    def test_purge_returns_zero_when_redis_expired_the_keys(
        self, redis_client: redis.Redis
    ) -> None:
        """With no grace Redis drops keys at their deadline; purge then finds nothing to do."""
        idempotency = RedisIdempotencyStore(redis_client, grace=0.0)
        idempotency.complete("k", "f", "{}", now=0.0, ttl=0.05)
        time.sleep(0.2)
        assert idempotency.purge(1.0) == 0
        assert idempotency.claim("k", "f", now=1.0, lease=60.0).state is ClaimState.CLAIMED

    def test_find_pending_skips_actions_redis_expired(self, redis_client: redis.Redis) -> None:
        """An id whose action Redis deleted is dropped from the index, not returned."""
        approvals = RedisApprovalStore(redis_client)
        approvals.create(action())
        redis_client.delete("callgate:approval:apr_1")
        assert approvals.find_pending("prop", now=1.0) is None
        assert redis_client.lrange("callgate:proposal:prop", 0, -1) == []

    def test_late_decision_extends_the_index_too(self, redis_client: redis.Redis) -> None:
        """The proposal index lives at least as long as the actions it lists."""
        approvals = RedisApprovalStore(redis_client, retention=10.0, grace=0.0)
        approvals.create(action(expires_at=1.0))
        decided = approvals.decide("apr_1", approve=True, by="alice", now=100.0)
        assert decided is not None and decided.state is ApprovalState.EXPIRED
        action_ttl = redis_client.pttl("callgate:approval:apr_1")
        assert redis_client.pttl("callgate:proposal:prop") >= action_ttl > 0


class TestClients:
    def test_prefixes_keep_deployments_apart(self, redis_client: redis.Redis) -> None:
        """Two prefixes on one server share nothing, purge included."""
        a = RedisCounterStore(redis_client, prefix="a:")
        b = RedisCounterStore(redis_client, prefix="b:")
        a.incr("c", 5, now=0.0, ttl=10.0)
        b.incr("c", 1, now=0.0, ttl=10.0)
        assert a.get("c", now=0.0) == 5
        assert b.purge(11.0) == 1
        assert a.get("c", now=0.0) == 5

    def test_prefix_with_glob_characters_is_matched_literally(
        self, redis_client: redis.Redis
    ) -> None:
        """A prefix like ``a*`` purges its own keys only, not ``ab``'s."""
        star = RedisCounterStore(redis_client, prefix="a*")
        other = RedisCounterStore(redis_client, prefix="ab")
        star.incr("c", now=0.0, ttl=10.0)
        other.incr("counter:c", now=0.0, ttl=10.0)
        assert star.purge(11.0) == 1
        assert other.get("counter:c", now=0.0) == 1

    def test_decoding_client_works_too(self, redis_url: str) -> None:
        """A client made with decode_responses=True gives the same answers."""
        with open_redis_stores(redis.Redis.from_url(redis_url, decode_responses=True)) as stores:
            try:
                stores.idempotency.complete("k", "f", '"r"', now=0.0, ttl=10.0)
                assert stores.idempotency.claim("k", "f", now=1.0, lease=5.0).result == '"r"'
                stores.approvals.create(action())
                assert stores.approvals.get("apr_1") == action()
                assert stores.approvals.find_pending("prop", now=1.0) == action()
                assert stores.counters.incr("c", now=0.0, ttl=10.0) == 1
            finally:
                stores.client.close()

    def test_stores_opened_from_a_url_close_their_client(self, redis_url: str) -> None:
        """open_redis_stores(url) owns the client it made; a passed-in client is left open."""
        with open_redis_stores(redis_url) as stores:
            assert stores.owns_client
            stores.counters.incr("c", now=0.0, ttl=10.0)
        client = redis.Redis.from_url(redis_url)
        try:
            with open_redis_stores(client) as stores:
                assert not stores.owns_client
            assert client.ping()
        finally:
            client.close()


class TestEvictionPolicy:
    """A Redis that may evict keys would forget taint marks, limits and claims: refused."""

    @pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "volatile-lru"])
    def test_an_evicting_server_is_refused(self, redis_client: redis.Redis, policy: str) -> None:
        """open_redis_stores raises ConfigurationError naming the policy, unless told otherwise."""
        redis_client.config_set("maxmemory-policy", policy)
        try:
            with pytest.raises(ConfigurationError, match=policy):
                open_redis_stores(redis_client)
            open_redis_stores(redis_client, allow_eviction=True).close()
        finally:
            redis_client.config_set("maxmemory-policy", "noeviction")

    def test_noeviction_is_accepted(self, redis_client: redis.Redis) -> None:
        """The default server policy (noeviction) opens the stores."""
        assert redis_client.config_get("maxmemory-policy")["maxmemory-policy"] == "noeviction"
        stores = open_redis_stores(redis_client)
        assert stores.counters.admits("steps:s1", now=0.0)
        stores.close()


class TestSealedActions:
    """Whoever can write the Redis keys cannot change what an approved action runs."""

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("arguments", '{"account":"ATTACKER","amount_cents":700}'),
            ("principal_id", "ADMIN"),
            ("scopes", '["everything"]'),
            ("authenticated", "1"),
            ("expires_at", "9e12"),
            ("seal", ""),
        ],
    )
    def test_an_edited_hash_refuses_to_run(
        self, redis_client: redis.Redis, field: str, value: str
    ) -> None:
        """A field rewritten with HSET: approving ends CONFIRMATION_DENIED and the tool never runs."""
        world = World()
        store = RedisApprovalStore(redis_client)
        guard = payout_guard(world, approvals=store, approval_key="k1")
        pending = guard.session("s1", Principal.anonymous(role="agent")).execute("payout", PAYOUT)
        assert pending.approval_id is not None
        redis_client.hset(f"callgate:approval:{pending.approval_id}", field, value)
        assert guard.approve(pending.approval_id, by="alice").code is Code.CONFIRMATION_DENIED
        assert world.runs == []


class TestLeaseClock:
    """Redis judges leases on its own TIME, read inside the claim script."""

    def test_a_claim_is_stamped_with_the_servers_time(self, redis_client: redis.Redis) -> None:
        """The stamp lies between two readings of the server's TIME, whatever ``now`` said."""
        stores = RedisIdempotencyStore(redis_client)
        before = _server_time(redis_client)
        stores.claim("k", "f", now=-1e9, lease=60.0)
        after = _server_time(redis_client)
        leased_at = next(
            float(redis_client.hget(name, "leased_at") or 0) for name in redis_client.keys("*")
        )
        assert before <= leased_at <= after

    def test_the_purge_script_keeps_claims_for_the_rules_retention(self) -> None:
        """The Lua purge's day on the server's clock is ``_rules.ABANDONED_RETENTION``."""
        assert f"- {int(ABANDONED_RETENTION)}  -- _rules.ABANDONED_RETENTION" in DEADLINE_PURGE


def _server_time(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6
