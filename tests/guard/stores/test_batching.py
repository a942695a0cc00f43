"""The chain's start on a store that batches (``guard.batching``): the budget's ceilings counted
with the loop counter in one round trip answer exactly as the stage-by-stage loop does."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard import ToolResult
from guard.call import Call
from guard.shop import ShopApp, build_shop, shop_policy
from guard.stores import Ceiling, ClaimAsk, MemoryCounterStore
from guard.stores.redis import RedisStores, open_redis_stores
from guard.testing import ManualClock


class BatchingMemoryCounters(MemoryCounterStore):
    """The memory store, taking the batched start as Redis does: the same path, locally."""

    batches = True


@dataclass
class EndedCalls:
    """Keeps each finished call; asks for no stage events, so the batched start applies."""

    wants_stage_events = False
    ended: list[Call] = field(default_factory=list)

    def call_started(self, call: Call) -> None:
        pass

    def stage_started(self, call: Call, stage: str) -> None:
        pass

    def stage_ended(self, call: Call, record: Any) -> None:
        pass

    def retry_scheduled(self, call: Call, retry: Any) -> None:
        pass

    def call_ended(self, call: Call, result: ToolResult) -> None:
        self.ended.append(call)


def refund(order_id: str, cents: int) -> str:
    return json.dumps(
        {"order_id": order_id, "amount_cents": cents, "currency": "BRL", "reason": "damaged"}
    )


POLICY = dict(
    max_steps_per_session=14,
    max_steps_per_turn=6,
    max_invalid_in_a_row=2,
    max_identical_calls=2,
)

CALLS = {
    "read": ("get_order", '{"order_id": "ORD-1001"}'),
    "read_other": ("get_order", '{"order_id": "ORD-1002"}'),
    "bad_json": ("get_order", '{"order_id": '),
    "bad_args": ("get_order", '{"order": 1}'),
    "unknown": ("drop_tables", "{}"),
    "search": ("search_refund_policy", '{"query": "damaged item"}'),
    "refund": ("refund_order", refund("ORD-1001", 500)),
    "refund_more": ("refund_order", refund("ORD-1001", 9000)),
    "refund_other": ("refund_order", refund("ORD-1002", 700)),
    "refund_too_much": ("refund_order", refund("ORD-1001", 11_000)),
}
APPROVE = "approve the last approval asked for"


def shop_with(counters: Any, observer: EndedCalls, **stores: Any) -> ShopApp:
    policy = shop_policy(**POLICY)
    return build_shop(
        clock=ManualClock(), policy=policy, counters=counters, observer=observer, **stores
    )


def run(shop: ShopApp, script: list[tuple[str, bool]]) -> list[tuple[object, ...]]:
    """Each call's answer and what the finished call says of itself."""
    session = shop.session(f"s-{uuid.uuid4().hex}", "CUS-1")
    seen, asked = [], None
    for name, next_turn in script:
        if next_turn:
            session.next_turn()
        if name == APPROVE:
            if asked is None:
                continue
            result = shop.guard.approve(asked, by="human")
        else:
            result = session.execute(*CALLS[name])
        asked = result.approval_id or asked
        message = re.sub("apr_[0-9a-f]+", "apr_", result.message)  # approval ids are random
        seen.append((result.code, result.ok, result.outcome, message, result.replayed))
    return seen


def records(observer: EndedCalls) -> list[tuple[object, ...]]:
    return [
        (
            call.step,
            call.invalid_streak,
            call.spec is not None,
            call.arguments is not None,
            call.fingerprint,
            [(s.name, s.outcome, s.code) for s in call.stages],
        )
        for call in observer.ended
    ]


SCRIPTS = st.lists(
    st.tuples(st.sampled_from([*sorted(CALLS), APPROVE]), st.booleans()), max_size=20
)
"""Calls of one session, each maybe after a new turn."""


Batching = Callable[[], tuple[Any, dict[str, Any]]]
"""Fresh stores: a counter store that batches, and the other stores beside it."""


@pytest.fixture(params=["memory", "redis"])
def batching(request: pytest.FixtureRequest) -> Iterator[Batching]:
    """Fresh stores per call: daily sums are the principal's, so each example needs its own."""
    if request.param == "memory":
        yield lambda: (BatchingMemoryCounters(), {})
        return
    client: redis.Redis = request.getfixturevalue("redis_client")
    opened: list[RedisStores] = []

    def fresh() -> tuple[Any, dict[str, Any]]:
        stores = open_redis_stores(client, prefix=f"b{uuid.uuid4().hex}:")
        opened.append(stores)
        return stores.counters, {"idempotency": stores.idempotency, "approvals": stores.approvals}

    try:
        yield fresh
    finally:
        for stores in opened:
            stores.close()


class TestSameAnswers:
    """Batched or stage by stage, every call gets the same answer and the same record."""

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(script=SCRIPTS)
    def test_any_sequence_of_calls(
        self, batching: Batching, script: list[tuple[str, bool]]
    ) -> None:
        """Reads, repeats, malformed and unknown calls, refunds, turns: answers, steps, streaks,
        stage records and side effects agree with the memory store's plain loop."""
        counters, stores = batching()
        plain_seen, batched_seen = EndedCalls(), EndedCalls()
        plain = shop_with(MemoryCounterStore(), plain_seen)
        batched = shop_with(counters, batched_seen, **stores)
        assert batched.guard._batched is not None and plain.guard._batched is None
        assert run(batched, script) == run(plain, script)
        assert records(batched_seen) == records(plain_seen)
        assert batched.backend.side_effects == plain.backend.side_effects

    def test_a_budget_refusal_undoes_the_stages_after_it(self, batching: Batching) -> None:
        """Over the step limit, a valid call ends at the budget: no tool, arguments or loop
        count on the record, one stage span, and the loop counter was never counted."""
        counters, stores = batching()
        seen = EndedCalls()
        shop = shop_with(counters, seen, **stores)
        session = shop.session("over", "CUS-1")
        answers = [session.execute(*CALLS["read_other"]).code for _ in range(16)]
        assert answers[-1] == "STEP_LIMIT"
        last = seen.ended[-1]
        assert (last.spec, last.arguments, last.fingerprint, last.loop_count) == (None,) * 3 + (0,)
        assert [s.name for s in last.stages] == ["budget"]

    def test_an_invalid_streak_at_its_limit_is_not_reset_by_a_valid_call(
        self, batching: Batching
    ) -> None:
        """VALIDATION_BUDGET_EXHAUSTED on a valid call keeps the streak: the call ended at the
        budget, so its arguments, parsed ahead, do not count as a valid call."""
        counters, stores = batching()
        seen = EndedCalls()
        shop = shop_with(counters, seen, **stores)
        session = shop.session("streak", "CUS-1")
        assert [session.execute(*CALLS["bad_json"]).code for _ in range(2)] == ["INVALID_JSON"] * 2
        again = [session.execute(*CALLS["read"]).code for _ in range(2)]
        assert again == ["VALIDATION_BUDGET_EXHAUSTED"] * 2
        assert shop.session("other", "CUS-1").execute(*CALLS["read"]).ok
        loop = f"loop:streak:{seen.ended[-1].fingerprint}"  # the same read, in this session
        assert counters.get(loop, now=shop.guard.env.clock.now()) == 0  # never counted


class TestStoreFailure:
    """A store that fails during the batched trip fails the call as the budget stage failing."""

    def test_a_refused_script_is_internal_error_at_the_budget(
        self, redis_client: redis.Redis
    ) -> None:
        """Redis refusing writes (maxmemory reached, noeviction): the read answers INTERNAL_ERROR,
        recorded at the budget with nothing after it, nothing run, nothing raised."""
        stores = open_redis_stores(redis_client)
        seen = EndedCalls()
        shop = shop_with(
            stores.counters,
            seen,
            idempotency=stores.idempotency,
            approvals=stores.approvals,
        )
        session = shop.session("full", "CUS-1")
        redis_client.config_set("maxmemory", 1)
        try:
            result = session.execute(*CALLS["read"])
        finally:
            redis_client.config_set("maxmemory", 0)
            stores.close()
        assert (result.code, result.outcome) == ("INTERNAL_ERROR", "not_applied")
        assert [s.name for s in seen.ended[-1].stages] == ["budget"]
        assert seen.ended[-1].spec is None and shop.backend.side_effects == 0


class TestClaimAfter:
    """A write's claim made in the counting script (``RedisIdempotencyStore.claim_after``)."""

    def test_a_write_the_budget_refuses_claims_nothing(self, redis_client: redis.Redis) -> None:
        """Over the step limit, a refund ends at the budget: no claim, no lock, nothing filed
        or run, so the same refund in another session is not held up by it."""
        prefix = f"c{uuid.uuid4().hex}:"
        stores = open_redis_stores(redis_client, prefix=prefix)
        shop = shop_with(
            stores.counters,
            EndedCalls(),
            idempotency=stores.idempotency,
            approvals=stores.approvals,
        )
        try:
            session = shop.session("over", "CUS-1")
            for step in range(14):  # reads and their loop refusals: every one takes a step
                if step % 5 == 0:
                    session.next_turn()
                session.execute(*CALLS["read" if step % 2 else "read_other"])
            session.next_turn()
            refused = session.execute(*CALLS["refund"])
            assert refused.code == "STEP_LIMIT"
            assert list(redis_client.scan_iter(match=f"{prefix}idem:*")) == []
            other = shop.session("fresh", "CUS-1")
            assert other.execute(*CALLS["read"]).ok
            assert other.execute(*CALLS["refund"]).approval_id is not None
        finally:
            stores.close()
        assert shop.backend.side_effects == 0

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        limits=st.lists(
            st.tuples(st.integers(-1, 3), st.integers(0, 4), st.booleans()), max_size=4
        ),
        before=st.sampled_from(["none", "in_flight", "completed", "other", "locked"]),
        take_stale=st.booleans(),
        with_lock=st.booleans(),
    )
    def test_one_script_answers_as_counting_then_claiming(
        self,
        redis_client: redis.Redis,
        redis_url: str,
        limits: list[tuple[int, int, bool]],
        before: str,
        take_stale: bool,
        with_lock: bool,
    ) -> None:
        """The same ceilings and claim, from the same state, on the one script and on two steps
        (counters on another connection: counted, then claimed): the same values, the same
        claim, and the same keys left behind."""
        other_client = redis.Redis.from_url(redis_url)
        answers, states = [], []
        try:
            for client in (redis_client, other_client):
                prefix = f"d{uuid.uuid4().hex}:"
                stores = open_redis_stores(redis_client, prefix=prefix)
                counters = open_redis_stores(client, prefix=prefix).counters
                ceilings = []
                for i, (limit, preload, counted) in enumerate(limits):
                    if preload:
                        counters.incr(f"c{i}", preload, now=0.0, ttl=60.0)
                    ceilings.append(Ceiling(f"c{i}", limit, 60.0 if counted else None))
                idem = stores.idempotency
                lock = "l" if with_lock else None
                if before in ("in_flight", "completed"):
                    idem.claim("k", "f", now=0.0, lease=30.0)
                if before == "completed":
                    idem.complete("k", "f", '"done"', now=0.0, ttl=60.0)
                if before == "other":
                    idem.claim("k", "g", now=0.0, lease=30.0)
                if before == "locked" and lock is not None:
                    idem.claim("k2", "f", now=0.0, lease=30.0, lock=lock)
                ask = ClaimAsk(
                    key="k", fingerprint="f", lease=30.0, take_stale=take_stale, lock=lock
                )
                answers.append(idem.claim_after(counters, ceilings, ask, now=1.0))
                keys = sorted(
                    k.decode()[len(prefix) :] for k in redis_client.scan_iter(f"{prefix}*")
                )
                states.append(keys)
                stores.close()
        finally:
            other_client.close()
        assert answers[0] == answers[1]
        assert states[0] == states[1]
