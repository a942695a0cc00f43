"""An approval on Redis decides and claims in one script (``RedisApprovalStore.decide_then_claim``):
the chain runs up to its claim on the action as read, and nothing the decision could change may
run, nor leave a claim behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from guard import Code, Principal
from guard.stores import ApprovalState, ApprovalStore, ClaimAsk, PendingAction
from guard.stores.redis import RedisStores, open_redis_stores
from guard.testing import ManualClock
from tests.guard.stages.test_confirm_facts import PAYOUT, World, payout_guard
from tests.guard.stores.test_approvals import action


@pytest.fixture
def stores(redis_client: redis.Redis) -> Iterator[RedisStores]:
    opened = open_redis_stores(redis_client, prefix=f"ap{uuid.uuid4().hex}:")
    try:
        yield opened
    finally:
        opened.close()


class EditedAfterRead:
    """The approval store, with someone rewriting the action's hash just after the guard read it
    (for its seal) and before the decision: the window the one-script decision opens."""

    def __init__(self, inner: ApprovalStore, client: redis.Redis, key: str, **fields: str) -> None:
        self._inner, self._client, self._key, self._fields = inner, client, key, fields

    def get(self, approval_id: str) -> PendingAction | None:
        action = self._inner.get(approval_id)
        self._client.hset(self._key + approval_id, mapping=self._fields)
        return action

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def claims(client: redis.Redis, stores: RedisStores) -> list[bytes]:
    stores.close()  # every unawaited write answered first
    prefix = stores.idempotency._keys
    return sorted(client.scan_iter(match=prefix + "*"))


def guard_on(stores: RedisStores, world: World, **kw: Any) -> Any:
    kw.setdefault("approvals", stores.approvals)
    return payout_guard(
        world, idempotency=stores.idempotency, counters=stores.counters, approval_key="k1", **kw
    )


def propose(guard: Any) -> str:
    """A payout proposed; its approval id."""
    pending = guard.session("s1", Principal(id="U1", role="agent")).execute("payout", PAYOUT)
    assert pending.approval_id is not None
    return str(pending.approval_id)


class TestDecideThenClaim:
    def test_an_approval_runs_once_and_a_second_replays(self, stores: RedisStores) -> None:
        """Approved twice: one run; the second answer is the first's replay."""
        world = World()
        guard = guard_on(stores, world)
        assert guard._ahead is not None  # the one-script approval applies
        approval_id = propose(guard)
        first = guard.approve(approval_id, by="alice")
        second = guard.approve(approval_id, by="bob")
        assert first.ok and not first.replayed
        assert second.ok and second.replayed
        assert len(world.runs) == 1

    @pytest.mark.parametrize(
        "fields",
        [{"arguments": '{"account":"XX00 0000","amount_cents":700000}'}, {"role": "admin"}],
        ids=["arguments", "role"],
    )
    def test_an_edit_between_read_and_decision_runs_nothing_and_keeps_no_claim(
        self, stores: RedisStores, redis_client: redis.Redis, fields: dict[str, str]
    ) -> None:
        """The hash rewritten after the seal check read it: the decision's copy fails its seal,
        so nothing runs, the claim the script made is let go, and the answer is the one a
        tampered action always gets."""
        world = World()
        edited = EditedAfterRead(stores.approvals, redis_client, stores.approvals._keys, **fields)
        guard = guard_on(stores, world, approvals=edited)
        approval_id = propose(guard)
        result = guard.approve(approval_id, by="alice")
        assert result.code is Code.CONFIRMATION_DENIED
        assert world.runs == []
        assert claims(redis_client, stores) == []

    def test_an_expired_action_claims_nothing(
        self, stores: RedisStores, redis_client: redis.Redis
    ) -> None:
        """Past its expiry the decision is EXPIRED: no claim is made, nothing runs."""
        world, clock = World(), ManualClock()
        guard = guard_on(stores, world, clock=clock)
        approval_id = propose(guard)
        clock.advance(guard.policy.confirmation_ttl + 1)
        result = guard.approve(approval_id, by="alice")
        assert result.code is Code.CONFIRMATION_EXPIRED
        assert world.runs == []
        assert claims(redis_client, stores) == []

    def test_an_unknown_id_is_not_found_and_claims_nothing(
        self, stores: RedisStores, redis_client: redis.Redis
    ) -> None:
        world = World()
        guard = guard_on(stores, world)
        with pytest.raises(LookupError):
            guard.approve("apr_unknown", by="alice")
        assert claims(redis_client, stores) == []


class TestOneScriptAgreesWithTwoSteps:
    """``decide_then_claim`` in one script answers as deciding, then claiming only an action that
    stands approved, does in two steps (the idempotency store on another connection)."""

    @pytest.mark.parametrize(
        ("approve", "now", "before"),
        [
            (True, 10.0, "pending"),
            (False, 10.0, "pending"),
            (True, 1000.0, "pending"),  # past expires_at: EXPIRED
            (True, 10.0, "approved"),  # decided already: stands approved, so it claims
            (True, 10.0, "denied"),
        ],
        ids=["approved", "denied", "expired", "approved-before", "denied-before"],
    )
    def test_same_action_same_claim_same_keys(
        self, redis_client: redis.Redis, redis_url: str, approve: bool, now: float, before: str
    ) -> None:
        other = redis.Redis.from_url(redis_url)
        answers, keys = [], []
        try:
            for client in (redis_client, other):
                prefix = f"dc{uuid.uuid4().hex}:"
                stores = open_redis_stores(redis_client, prefix=prefix)
                idempotency = open_redis_stores(client, prefix=prefix).idempotency
                stores.approvals.create(action(id="apr_1"))
                if before != "pending":
                    stores.approvals.decide("apr_1", approve=before == "approved", by="x", now=5.0)
                ask = ClaimAsk(key="a_1", fingerprint="fp1", lease=30.0, take_stale=False, lock="l")
                decided, claim = stores.approvals.decide_then_claim(
                    "apr_1", approve=approve, by="alice", now=now, idempotency=idempotency, ask=ask
                )
                answers.append((decided, claim))
                stores.close()
                idempotency_keys = client.scan_iter(match=f"{prefix}idem:*")
                keys.append(sorted(key.decode()[len(prefix) :] for key in idempotency_keys))
        finally:
            other.close()
        assert answers[0] == answers[1]
        assert keys[0] == keys[1]
        decided, claim = answers[0]
        assert decided is not None
        stands_approved = decided.state is ApprovalState.APPROVED
        assert (claim is not None) == stands_approved
        assert keys[0] == (["idem:a_1", "idem:l"] if stands_approved else [])
