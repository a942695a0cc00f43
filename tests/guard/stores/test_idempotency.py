"""The IdempotencyStore contract, run against every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.codes import Code
from guard.result import Outcome, ToolResult
from guard.stages.idempotency import stored
from guard.stores import (
    Claim,
    ClaimState,
    IdempotencyStore,
    MemoryIdempotencyStore,
    SQLiteIdempotencyStore,
)
from guard.stores._rules import ABANDONED_RETENTION, UNKNOWN_MARK, outcome_unknown
from guard.stores.redis import RedisIdempotencyStore
from guard.testing import ManualClock
from tests.guard.stores.conftest import backdate_leases
from tests.guard.stores.threads import run_together

LEASE = 60.0
TTL = 3600.0
STEP = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False)
FUZZ = settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def store_clock() -> ManualClock:
    """The memory and SQLite stores' lease clock, moved by hand (Redis has its own: TIME)."""
    return ManualClock(0.0)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(
    request: pytest.FixtureRequest, tmp_path: Path, store_clock: ManualClock
) -> Iterator[IdempotencyStore]:
    if request.param == "memory":
        yield MemoryIdempotencyStore(lease_clock=store_clock.lease_clock)
        return
    if request.param == "redis":
        yield RedisIdempotencyStore(request.getfixturevalue("redis_client"))
        return
    sqlite_store = SQLiteIdempotencyStore(
        tmp_path / "stores.db", lease_clock=store_clock.lease_clock
    )
    yield sqlite_store
    sqlite_store.close()


@pytest.fixture
def elapse(
    request: pytest.FixtureRequest, store: IdempotencyStore, store_clock: ManualClock
) -> Callable[[float], None]:
    """Let seconds pass on the store's lease clock (the callers' ``now`` is theirs to pass)."""
    if isinstance(store, RedisIdempotencyStore):
        client = request.getfixturevalue("redis_client")

        def backdate(seconds: float) -> None:
            backdate_leases(client, seconds)

        return backdate
    return store_clock.advance


def claim(store: IdempotencyStore, key: str = "k", fingerprint: str = "f", *, now: float) -> Claim:
    return store.claim(key, fingerprint, now=now, lease=LEASE)


class TestClaim:
    def test_first_claim_takes_the_key(self, store: IdempotencyStore) -> None:
        """A key nobody holds is CLAIMED, with no result."""
        assert claim(store, now=0.0) == Claim(state=ClaimState.CLAIMED)

    def test_second_identical_claim_is_in_flight(self, store: IdempotencyStore) -> None:
        """While the owner works, an identical claim is told the write is IN_FLIGHT."""
        claim(store, now=0.0)
        assert claim(store, now=1.0).state is ClaimState.IN_FLIGHT

    def test_claim_with_other_fingerprint_while_in_flight_conflicts(
        self, store: IdempotencyStore
    ) -> None:
        """The same key with other arguments while in flight is a CONFLICT."""
        claim(store, now=0.0)
        assert claim(store, fingerprint="other", now=1.0).state is ClaimState.CONFLICT

    def test_keys_are_independent(self, store: IdempotencyStore) -> None:
        """Holding one key does not affect another."""
        claim(store, "a", now=0.0)
        assert claim(store, "b", now=0.0).state is ClaimState.CLAIMED


class TestComplete:
    def test_completed_key_replays_its_result(self, store: IdempotencyStore) -> None:
        """After complete, an identical claim is COMPLETED with the stored result."""
        claim(store, now=0.0)
        store.complete("k", "f", '{"ok": true}', now=1.0, ttl=TTL)
        assert claim(store, now=2.0) == Claim(state=ClaimState.COMPLETED, result='{"ok": true}')

    def test_completed_key_with_other_fingerprint_conflicts(self, store: IdempotencyStore) -> None:
        """The same key with other arguments after completion is a CONFLICT, not a replay."""
        claim(store, now=0.0)
        store.complete("k", "f", "{}", now=1.0, ttl=TTL)
        assert claim(store, fingerprint="other", now=2.0) == Claim(state=ClaimState.CONFLICT)

    def test_complete_without_claim_records_the_result(self, store: IdempotencyStore) -> None:
        """complete is an upsert: it works on a key that was never claimed."""
        store.complete("k", "f", '"r"', now=0.0, ttl=TTL)
        assert claim(store, now=1.0) == Claim(state=ClaimState.COMPLETED, result='"r"')

    def test_complete_again_replaces_the_result(self, store: IdempotencyStore) -> None:
        """A second complete overwrites the result and the fingerprint."""
        store.complete("k", "f", '"first"', now=0.0, ttl=TTL)
        store.complete("k", "g", '"second"', now=1.0, ttl=TTL)
        assert claim(store, fingerprint="g", now=2.0).result == '"second"'

    def test_result_replays_through_its_ttl_then_expires(self, store: IdempotencyStore) -> None:
        """A result replays until now + ttl inclusive; afterwards the key is free again."""
        store.complete("k", "f", "{}", now=0.0, ttl=10.0)
        assert claim(store, now=10.0).state is ClaimState.COMPLETED
        assert claim(store, now=10.5).state is ClaimState.CLAIMED

    def test_expired_result_is_free_for_other_arguments(self, store: IdempotencyStore) -> None:
        """An expired result no longer conflicts: it behaves as if purged."""
        store.complete("k", "f", "{}", now=0.0, ttl=10.0)
        assert claim(store, fingerprint="other", now=11.0).state is ClaimState.CLAIMED


class TestRelease:
    def test_release_frees_an_in_flight_claim(self, store: IdempotencyStore) -> None:
        """After release, the next identical call may claim the key and run."""
        claim(store, now=0.0)
        store.release("k")
        assert claim(store, now=1.0).state is ClaimState.CLAIMED

    def test_release_keeps_a_completed_result(self, store: IdempotencyStore) -> None:
        """release never deletes a completed result: it must keep replaying."""
        store.complete("k", "f", '"r"', now=0.0, ttl=TTL)
        store.release("k")
        assert claim(store, now=1.0) == Claim(state=ClaimState.COMPLETED, result='"r"')

    def test_release_of_unknown_key_does_nothing(self, store: IdempotencyStore) -> None:
        """Releasing a key nobody holds is harmless."""
        store.release("nobody")
        assert claim(store, "nobody", now=0.0).state is ClaimState.CLAIMED


class TestLease:
    """A lease runs on the store's lease clock (``elapse``), whatever ``now`` the callers pass."""

    def test_claim_within_lease_stays_in_flight(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """Just before the end of the lease the owner still holds the key."""
        claim(store, now=0.0)
        elapse(LEASE - 1.0)
        assert claim(store, now=LEASE).state is ClaimState.IN_FLIGHT

    def test_claim_past_lease_is_taken_over(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """A claim older than the lease (a crashed owner) may be claimed again."""
        claim(store, now=0.0)
        elapse(LEASE + 1.0)
        assert claim(store, now=LEASE + 1.0).state is ClaimState.CLAIMED

    def test_takeover_starts_a_new_lease(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """After a takeover the new owner holds the key for a full lease."""
        claim(store, now=0.0)
        elapse(LEASE + 1.0)
        claim(store, now=LEASE + 1.0)
        elapse(1.0)
        assert claim(store, now=LEASE + 2.0).state is ClaimState.IN_FLIGHT

    def test_stale_claim_is_free_for_other_arguments(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """A stale claim no longer conflicts: it behaves as if purged."""
        claim(store, now=0.0)
        elapse(LEASE + 1.0)
        assert claim(store, fingerprint="other", now=LEASE + 1.0).state is ClaimState.CLAIMED

    def test_stale_claim_is_reported_to_a_caller_that_may_not_take_it(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """take_stale=False: a stale claim is STALE (other arguments: CONFLICT) and stays held."""
        claim(store, now=0.0)
        elapse(LEASE + 1.0)
        late = LEASE + 1.0
        assert store.claim("k", "f", now=late, lease=LEASE, take_stale=False).state is (
            ClaimState.STALE
        )
        assert store.claim("k", "x", now=late, lease=LEASE, take_stale=False).state is (
            ClaimState.CONFLICT
        )
        elapse(1.0)
        assert store.claim("k", "f", now=late + 1, lease=LEASE, take_stale=False).state is (
            ClaimState.STALE
        )

    def test_a_stale_claim_survives_purge(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """Purging just after the lease keeps the stale claim, so it still answers STALE."""
        claim(store, now=0.0)
        elapse(LEASE + 20.0)
        store.purge(LEASE + 10.0)
        state = store.claim("k", "f", now=LEASE + 20.0, lease=LEASE, take_stale=False).state
        assert state is ClaimState.STALE

    def test_live_claims_are_unaffected_by_take_stale(self, store: IdempotencyStore) -> None:
        """Within the lease take_stale changes nothing: IN_FLIGHT, and a free key is CLAIMED."""
        assert store.claim("k", "f", now=0.0, lease=LEASE, take_stale=False).state is (
            ClaimState.CLAIMED
        )
        assert store.claim("k", "f", now=1.0, lease=LEASE, take_stale=False).state is (
            ClaimState.IN_FLIGHT
        )

    def test_lease_is_the_callers(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """Staleness is judged with the lease passed to the later claim."""
        store.claim("k", "f", now=0.0, lease=100.0)
        elapse(20.0)
        assert store.claim("k", "f", now=20.0, lease=10.0).state is ClaimState.CLAIMED


class TestPurge:
    def test_purge_deletes_expired_results_and_long_abandoned_claims(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """purge removes expired results, and claims only ABANDONED_RETENTION after their lease."""
        store.complete("old-result", "f", "{}", now=0.0, ttl=10.0)
        claim(store, "stale-claim", now=0.0)
        store.complete("live-result", "f", "{}", now=0.0, ttl=TTL)
        elapse(LEASE + 1.0)
        assert store.purge(LEASE + 1.0) == 1
        late = LEASE + ABANDONED_RETENTION + 1.0
        elapse(ABANDONED_RETENTION)
        assert store.purge(late) == 2  # the abandoned claim, and live-result expired meanwhile
        assert claim(store, "stale-claim", now=late).state is ClaimState.CLAIMED

    def test_purge_keeps_live_entries(self, store: IdempotencyStore) -> None:
        """Live claims and results survive a purge unchanged."""
        claim(store, "held", now=0.0)
        store.complete("done", "f", '"r"', now=0.0, ttl=TTL)
        store.purge(1.0)
        assert claim(store, "held", now=2.0).state is ClaimState.IN_FLIGHT
        assert claim(store, "done", now=2.0).result == '"r"'

    def test_purged_key_can_be_claimed(self, store: IdempotencyStore) -> None:
        """After purge a formerly completed key is free."""
        store.complete("k", "f", "{}", now=0.0, ttl=10.0)
        store.purge(11.0)
        assert claim(store, now=12.0).state is ClaimState.CLAIMED

    def test_purge_of_empty_store_returns_zero(self, store: IdempotencyStore) -> None:
        """Nothing to delete, nothing counted."""
        assert store.purge(1e9) == 0


class TestPurgeByStoreClock:
    """Deleting an abandoned claim also waits on the store's lease clock."""

    @FUZZ
    @given(ahead=st.floats(min_value=1.0, max_value=1e9, allow_nan=False), key=st.uuids())
    def test_a_purge_by_a_clock_far_ahead_keeps_a_live_claim(
        self, store: IdempotencyStore, ahead: float, key: object
    ) -> None:
        """A caller whose clock is any amount past the claim's deadline purges: the claim is
        live on the store's clock, so it is kept and still holds the key."""
        name = f"k-{key}"
        store.claim(name, "f", now=0.0, lease=LEASE)
        store.purge(LEASE + ABANDONED_RETENTION + ahead)
        assert store.claim(name, "f", now=0.0, lease=LEASE).state is ClaimState.IN_FLIGHT


class TestConcurrency:
    def test_eight_threads_claiming_one_key_yield_one_owner(self, store: IdempotencyStore) -> None:
        """Of eight simultaneous identical claims exactly one is CLAIMED, the rest IN_FLIGHT."""
        states = run_together(8, lambda _: claim(store, now=0.0).state)
        assert states.count(ClaimState.CLAIMED) == 1
        assert states.count(ClaimState.IN_FLIGHT) == 7

    def test_threads_claiming_many_keys_each_get_one_owner(self, store: IdempotencyStore) -> None:
        """Across 50 keys raced by 8 threads every key has exactly one owner."""
        keys = [f"k{i}" for i in range(50)]

        def work(_: int) -> list[str]:
            return [k for k in keys if claim(store, k, now=0.0).state is ClaimState.CLAIMED]

        claimed = [key for owned in run_together(8, work) for key in owned]
        assert sorted(claimed) == sorted(keys)


UNKNOWN = '{"ok":false,"code":"TIMEOUT","outcome":"unknown"}'
APPLIED = '{"ok":true,"code":"OK","outcome":"applied"}'


def locked(store: IdempotencyStore, key: str, *, now: float, take_stale: bool = False) -> Claim:
    return store.claim(key, "f", now=now, lease=LEASE, take_stale=take_stale, lock="lock")


class TestClockSteps:
    """Leases run on the store's lease clock: a caller's clock stepped any way (the soak's +1000 s
    agent) neither sees a live claim or lock stale nor keeps a stale one alive."""

    @FUZZ
    @given(steps=st.lists(STEP, min_size=1, max_size=4), key=st.uuids())
    def test_a_stepped_reader_never_takes_a_live_claim(
        self,
        store: IdempotencyStore,
        elapse: Callable[[float], None],
        steps: list[float],
        key: object,
    ) -> None:
        """Claimed at caller time 1000; readers at 1000 + step (forward or back) all see it in
        flight, even those whose step is far past the lease; once the store's lease passes, any
        of them sees it stale."""
        name = f"k-{key}"
        store.claim(name, "f", now=1000.0, lease=LEASE)
        for step in steps:
            reader = store.claim(name, "f", now=1000.0 + step, lease=LEASE, take_stale=True)
            assert reader.state is ClaimState.IN_FLIGHT
        elapse(LEASE + 0.5)
        late = store.claim(name, "f", now=1000.0 + steps[0], lease=LEASE, take_stale=False)
        assert late.state is ClaimState.STALE

    @FUZZ
    @given(steps=st.lists(STEP, min_size=1, max_size=4), key=st.uuids())
    def test_a_stepped_reader_never_takes_a_live_lock(
        self,
        store: IdempotencyStore,
        elapse: Callable[[float], None],
        steps: list[float],
        key: object,
    ) -> None:
        """The actor's lock, read by any stepped clock, holds another key off through the lease."""
        first, second, lock = f"a-{key}", f"b-{key}", f"l-{key}"
        store.claim(first, "f", now=1000.0, lease=LEASE, lock=lock)
        for step in steps:
            held = store.claim(second, "f", now=1000.0 + step, lease=LEASE, lock=lock)
            assert held == Claim(state=ClaimState.IN_FLIGHT, holder=first)
        elapse(LEASE + 0.5)
        stale = store.claim(second, "f", now=1000.0, lease=LEASE, lock=lock, take_stale=True)
        assert stale == Claim(state=ClaimState.STALE, holder=first)

    def test_a_claim_from_the_past_keeps_its_stamp(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """A claim read later than it was made keeps its own stamp: no reader renews it."""
        claim(store, now=0.0)
        elapse(LEASE / 2)
        assert claim(store, now=LEASE / 2).state is ClaimState.IN_FLIGHT
        elapse(LEASE / 2 - 1.0)  # a real server's clock moves on meanwhile: not to the edge
        assert claim(store, now=LEASE).state is ClaimState.IN_FLIGHT
        elapse(1.5)
        assert store.claim("k", "f", now=LEASE + 0.5, lease=LEASE, take_stale=False).state is (
            ClaimState.STALE
        )


class TestLock:
    """The actor's in-flight lock, taken and settled with a key's claim (``claim(lock=...)``)."""

    def test_a_lock_held_by_another_key_answers_in_flight_and_writes_nothing(
        self, store: IdempotencyStore
    ) -> None:
        """k2 is told IN_FLIGHT with k1 as holder; k2 itself stays free (claimable without it)."""
        assert locked(store, "k1", now=0.0).state is ClaimState.CLAIMED
        assert locked(store, "k2", now=1.0) == Claim(state=ClaimState.IN_FLIGHT, holder="k1")
        assert claim(store, "k2", now=2.0).state is ClaimState.CLAIMED

    def test_a_known_outcome_releases_the_lock(self, store: IdempotencyStore) -> None:
        """Completing k1 as applied frees the lock for k2; k1 still replays its own result."""
        locked(store, "k1", now=0.0)
        store.complete("k1", "f", APPLIED, now=1.0, ttl=TTL)
        assert locked(store, "k2", now=2.0).state is ClaimState.CLAIMED
        assert claim(store, "k1", now=3.0).result == APPLIED

    def test_release_releases_the_lock(self, store: IdempotencyStore) -> None:
        """Nothing happened under k1: the lock goes with its claim."""
        locked(store, "k1", now=0.0)
        store.release("k1")
        assert locked(store, "k2", now=1.0).state is ClaimState.CLAIMED

    def test_an_unknown_outcome_stays_on_the_lock_through_its_ttl(
        self, store: IdempotencyStore
    ) -> None:
        """k1 ended unknown: every other key gets that result, k1 as holder, until the ttl."""
        locked(store, "k1", now=0.0)
        store.complete("k1", "f", UNKNOWN, now=1.0, ttl=TTL)
        expected = Claim(state=ClaimState.COMPLETED, result=UNKNOWN, holder="k1")
        assert locked(store, "k2", now=1.0 + TTL) == expected
        assert locked(store, "k3", now=2.0 + TTL).state is ClaimState.CLAIMED

    def test_a_stale_lock_is_never_taken_over_by_another_key(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """Even a caller that may take stale claims is told STALE: its key is not the dead one."""
        locked(store, "k1", now=0.0)
        elapse(LEASE + 1)
        answer = locked(store, "k2", now=LEASE + 1, take_stale=True)
        assert answer == Claim(state=ClaimState.STALE, holder="k1")

    def test_the_holder_takes_its_own_stale_claim_and_lock_over(
        self, store: IdempotencyStore, elapse: Callable[[float], None]
    ) -> None:
        """The dead attempt's own key may be retried (a deduping backend matches it)."""
        locked(store, "k1", now=0.0)
        elapse(LEASE + 1)
        assert locked(store, "k1", now=LEASE + 1, take_stale=True).state is ClaimState.CLAIMED
        assert locked(store, "k2", now=LEASE + 2).holder == "k1"

    def test_a_lock_taken_over_is_not_settled_by_its_old_holder(
        self, store: IdempotencyStore
    ) -> None:
        """Once k1's record is gone and k2 holds the lock, k1 completing does not free k2's lock."""
        locked(store, "k1", now=0.0)
        store.release("k1")
        locked(store, "k2", now=1.0)
        store.complete("k1", "f", APPLIED, now=2.0, ttl=TTL)
        assert locked(store, "k3", now=3.0).holder == "k2"

    def test_one_of_many_keys_takes_the_lock(self, store: IdempotencyStore) -> None:
        """Eight sessions' keys racing for one lock: exactly one claims, the rest see it held."""
        answers = run_together(8, lambda i: locked(store, f"k{i}", now=0.0))
        claimed = [a for a in answers if a.state is ClaimState.CLAIMED]
        assert len(claimed) == 1
        holders = {a.holder for a in answers if a.state is not ClaimState.CLAIMED}
        assert len(holders) == 1 and holders != {None}

    def test_a_known_outcome_whose_data_says_unknown_still_releases(
        self, store: IdempotencyStore
    ) -> None:
        """The lock reads the result's own outcome, not a value in its data that spells it."""
        locked(store, "k1", now=0.0)
        tricky = '{"ok":true,"data":{"outcome":"unknown"},"outcome":"applied"}'
        store.complete("k1", "f", tricky, now=1.0, ttl=TTL)
        assert locked(store, "k2", now=2.0).state is ClaimState.CLAIMED

    def test_the_guard_spells_unknown_as_the_stores_read_it(self) -> None:
        """``stored`` of an unknown result carries the mark the stores look for first."""
        result = ToolResult(ok=False, code=Code.TIMEOUT, message="m", outcome=Outcome.UNKNOWN)
        assert UNKNOWN_MARK in stored(result) and outcome_unknown(stored(result))


class TestUnknownListing:
    """``record`` and ``unknown``: what an operator settling unknown outcomes reads."""

    def test_unknown_lists_the_key_and_the_lock_keeping_it(self, store: IdempotencyStore) -> None:
        """An unknown result is listed under its key and the lock it holds; known ones are not."""
        locked(store, "k1", now=0.0)
        store.complete("k1", "f", UNKNOWN, now=1.0, ttl=TTL)
        claim(store, "k2", now=1.0)
        store.complete("k2", "f", APPLIED, now=1.0, ttl=TTL)
        claim(store, "k3", now=1.0)  # in flight: no result yet
        found = {record.key: record for record in store.unknown(now=2.0)}
        assert sorted(found) == ["k1", "lock"]
        assert found["lock"].holder == "k1" and found["k1"].holder is None
        assert found["k1"].result == UNKNOWN and found["k1"].fingerprint == "f"
        assert found["k1"].expires_at == 1.0 + TTL

    def test_expired_unknowns_are_not_listed(self, store: IdempotencyStore) -> None:
        """Past its replay window an unknown result no longer answers repeats, so is not listed."""
        claim(store, "k1", now=0.0)
        store.complete("k1", "f", UNKNOWN, now=1.0, ttl=TTL)
        assert store.unknown(now=2.0 + TTL) == []

    def test_a_mark_inside_the_data_is_not_an_unknown_outcome(
        self, store: IdempotencyStore
    ) -> None:
        """Only the result's own outcome counts, not a tool's data spelling the same text."""
        claim(store, "k1", now=0.0)
        store.complete("k1", "f", '{"data":{"outcome":"unknown"},"outcome":"applied"}', now=1.0,
                       ttl=TTL)  # fmt: skip
        assert store.unknown(now=2.0) == []

    def test_record_reads_claims_results_and_absent_keys(self, store: IdempotencyStore) -> None:
        """In flight: no result; completed: the result; never stored: None."""
        claim(store, "k1", now=0.0)
        assert (record := store.record("k1")) is not None and record.result is None
        assert record.claimed_at == 0.0
        store.complete("k1", "f", APPLIED, now=1.0, ttl=TTL)
        assert (record := store.record("k1")) is not None and record.result == APPLIED
        assert store.record("nope") is None

    def test_completing_a_listed_lock_settles_it_for_every_later_claim(
        self, store: IdempotencyStore
    ) -> None:
        """Settling the lock's unknown: another key's claim of the lock replays the settled result."""
        locked(store, "k1", now=0.0)
        store.complete("k1", "f", UNKNOWN, now=1.0, ttl=TTL)
        for key in ("k1", "lock"):
            store.complete(key, "f", APPLIED, now=2.0, ttl=TTL)
        assert store.unknown(now=3.0) == []
        assert locked(store, "k2", now=3.0) == Claim(
            state=ClaimState.COMPLETED, result=APPLIED, holder="k1"
        )
