"""The CounterStore contract, run against every backend."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.stores import Ceiling, CounterStore, MemoryCounterStore, SQLiteCounterStore
from guard.stores.base import OneStepCounters, StoreFull
from guard.stores.redis import RedisCounterStore
from tests.guard.stores.threads import run_together

TTL = 100.0


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CounterStore]:
    if request.param == "memory":
        yield MemoryCounterStore()
        return
    if request.param == "redis":
        yield RedisCounterStore(request.getfixturevalue("redis_client"))
        return
    sqlite_store = SQLiteCounterStore(tmp_path / "stores.db")
    yield sqlite_store
    sqlite_store.close()


class TestIncr:
    def test_incr_creates_the_counter(self, store: CounterStore) -> None:
        """An absent counter starts at 0, so the first incr returns the amount."""
        assert store.incr("c", 3, now=0.0, ttl=TTL) == 3

    def test_incr_defaults_to_one_and_accumulates(self, store: CounterStore) -> None:
        """Successive increments add up; the default amount is 1."""
        assert [store.incr("c", now=0.0, ttl=TTL) for _ in range(3)] == [1, 2, 3]

    def test_incr_accepts_negative_amounts(self, store: CounterStore) -> None:
        """A negative amount gives back what an earlier incr took."""
        store.incr("c", 10, now=0.0, ttl=TTL)
        assert store.incr("c", -4, now=0.0, ttl=TTL) == 6

    def test_incr_resets_the_expiry(self, store: CounterStore) -> None:
        """Each incr extends the counter to now + ttl."""
        store.incr("c", now=0.0, ttl=10.0)
        store.incr("c", now=8.0, ttl=10.0)
        assert store.get("c", now=15.0) == 2

    def test_incr_after_expiry_starts_again(self, store: CounterStore) -> None:
        """An expired counter counts from 0 again."""
        store.incr("c", 5, now=0.0, ttl=10.0)
        assert store.incr("c", 1, now=11.0, ttl=10.0) == 1

    def test_incr_keeps_64_bit_values_exact(self, store: CounterStore) -> None:
        """Past 2**53, where a double rounds, the new value is still exact."""
        assert store.incr("big", 2**62 + 1, now=0.0, ttl=TTL) == 2**62 + 1
        assert store.incr("big", now=0.0, ttl=TTL) == 2**62 + 2

    @pytest.mark.parametrize("sign", [1, -1])
    def test_incr_stays_exact_across_2_53(self, store: CounterStore, sign: int) -> None:
        """Redis adds in Lua below 2**53 and in the hash past it: every value across the edge,
        either way, comes back exact, and reads back as it was returned."""
        start = sign * (2**53 - 2)
        assert store.incr("edge", start, now=0.0, ttl=TTL) == start
        seen = [store.incr("edge", sign, now=0.0, ttl=TTL) for _ in range(3)]
        assert seen == [start + sign * step for step in (1, 2, 3)]
        assert store.get("edge", now=0.0) == start + sign * 3
        assert store.incr("edge", -sign * 3, now=0.0, ttl=TTL) == start

    def test_counters_are_independent(self, store: CounterStore) -> None:
        """Keys do not share values."""
        store.incr("a", 5, now=0.0, ttl=TTL)
        assert store.incr("b", now=0.0, ttl=TTL) == 1


class TestGet:
    def test_get_of_absent_counter_is_zero(self, store: CounterStore) -> None:
        """An unknown counter reads as 0."""
        assert store.get("c", now=0.0) == 0

    def test_get_returns_the_current_value(self, store: CounterStore) -> None:
        """get reads what incr left without changing it."""
        store.incr("c", 7, now=0.0, ttl=TTL)
        assert store.get("c", now=1.0) == 7
        assert store.get("c", now=1.0) == 7

    def test_get_sees_the_counter_through_its_expiry_only(self, store: CounterStore) -> None:
        """A counter lives through now + ttl inclusive and reads 0 after."""
        store.incr("c", 7, now=0.0, ttl=10.0)
        assert store.get("c", now=10.0) == 7
        assert store.get("c", now=10.5) == 0


class TestReset:
    def test_reset_deletes_the_counter(self, store: CounterStore) -> None:
        """After reset the counter reads 0 and counts from 0."""
        store.incr("c", 7, now=0.0, ttl=TTL)
        store.reset("c")
        assert store.get("c", now=0.0) == 0
        assert store.incr("c", now=0.0, ttl=TTL) == 1

    def test_reset_of_absent_counter_does_nothing(self, store: CounterStore) -> None:
        """Resetting an unknown counter is harmless."""
        store.reset("c")
        assert store.get("c", now=0.0) == 0


class TestAddWithin:
    def test_adds_while_within_the_limit(self, store: CounterStore) -> None:
        """An amount that keeps the total <= limit is added and True returned."""
        assert store.add_within("c", 60, 100, now=0.0, ttl=TTL) is True
        assert store.add_within("c", 40, 100, now=0.0, ttl=TTL) is True
        assert store.get("c", now=0.0) == 100

    def test_refuses_to_exceed_the_limit(self, store: CounterStore) -> None:
        """An amount that would pass the limit is not added and False returned."""
        store.add_within("c", 60, 100, now=0.0, ttl=TTL)
        assert store.add_within("c", 41, 100, now=0.0, ttl=TTL) is False
        assert store.get("c", now=0.0) == 60

    def test_refuses_a_first_amount_over_the_limit(self, store: CounterStore) -> None:
        """Even an absent counter is not created by an amount above the limit."""
        assert store.add_within("c", 101, 100, now=0.0, ttl=TTL) is False
        assert store.get("c", now=0.0) == 0

    def test_refusal_leaves_the_expiry_alone(self, store: CounterStore) -> None:
        """A refused add does not extend the counter's life."""
        store.add_within("c", 60, 100, now=0.0, ttl=10.0)
        store.add_within("c", 60, 100, now=9.0, ttl=10.0)
        assert store.get("c", now=11.0) == 0

    def test_success_resets_the_expiry(self, store: CounterStore) -> None:
        """An accepted add extends the counter to now + ttl, like incr."""
        store.add_within("c", 10, 100, now=0.0, ttl=10.0)
        store.add_within("c", 10, 100, now=9.0, ttl=10.0)
        assert store.get("c", now=15.0) == 20

    def test_expired_counter_counts_from_zero(self, store: CounterStore) -> None:
        """After expiry the whole limit is available again."""
        store.add_within("c", 100, 100, now=0.0, ttl=10.0)
        assert store.add_within("c", 100, 100, now=11.0, ttl=10.0) is True
        assert store.get("c", now=11.0) == 100


class TestAdd:
    def test_add_is_incr_without_the_answer(self, store: CounterStore) -> None:
        """add counts like incr, expiry included, and the next read sees it."""
        store.add("c", now=0.0, ttl=10.0)
        store.add("c", 4, now=1.0, ttl=10.0)
        assert store.get("c", now=11.0) == 5
        store.add("c", now=12.0, ttl=10.0)  # past the expiry set at 1.0: starts again
        assert store.get("c", now=12.0) == 1

    def test_adds_are_applied_in_order_with_everything_else(self, store: CounterStore) -> None:
        """An add, a reset, an add, then an incr: each sees the one before."""
        store.add("c", 3, now=0.0, ttl=TTL)
        store.reset("c")
        store.add("c", 2, now=0.0, ttl=TTL)
        assert store.incr("c", now=0.0, ttl=TTL) == 3


class TestTally:
    def test_tally_adds_then_reads(self, store: CounterStore) -> None:
        """The new values of the counters added to, then the values read, in order."""
        store.incr("read", 7, now=0.0, ttl=TTL)
        store.incr("old", 9, now=0.0, ttl=1.0)
        values = store.tally([("a", TTL), ("b", 5.0)], now=2.0, reads=("read", "absent", "old"))
        assert values == [1, 1, 7, 0, 0]
        assert store.tally([("a", TTL)], now=3.0, reads=("a",)) == [2, 2]

    def test_tally_restarts_expired_counters_and_sets_each_ttl(self, store: CounterStore) -> None:
        """Each counter added to gets its own ttl; an expired one counts from zero."""
        store.incr("a", 5, now=0.0, ttl=1.0)
        assert store.tally([("a", 10.0), ("b", 20.0)], now=2.0) == [1, 1]
        assert (store.get("a", now=12.0), store.get("b", now=12.0)) == (1, 0 + 1)
        assert (store.get("a", now=12.5), store.get("b", now=22.0)) == (0, 1)

    def test_tally_keeps_64_bit_values_exact(self, store: CounterStore) -> None:
        """A value past 2**53 (where Lua's doubles round) reads back exactly."""
        big = 2**62 + 1
        store.incr("big", big, now=0.0, ttl=TTL)
        assert store.tally([], now=0.0, reads=("big",)) == [big]
        assert store.tally([("big", TTL)], now=0.0) == [big + 1]

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        steps=st.lists(
            st.tuples(st.sampled_from(["incr", "add", "tally", "reset"]), st.sampled_from("xyz")),
            max_size=12,
        )
    )
    def test_any_mix_agrees_with_incr_and_get(
        self, store: CounterStore, steps: list[tuple[str, str]]
    ) -> None:
        """A random mix of incr, add, tally and reset leaves what a plain dict predicts."""
        prefix = f"mix{uuid.uuid4().hex}:"  # the store outlives each example
        expected: dict[str, int] = {}
        for kind, name in steps:
            key = prefix + name
            if kind == "reset":
                store.reset(key)
                expected.pop(key, None)
                continue
            expected[key] = expected.get(key, 0) + 1
            if kind == "incr":
                assert store.incr(key, now=0.0, ttl=TTL) == expected[key]
            elif kind == "add":
                store.add(key, now=0.0, ttl=TTL)
            else:
                other = prefix + "w"
                assert store.tally([(key, TTL)], now=0.0, reads=(other,)) == [expected[key], 0]
        reads = tuple(prefix + name for name in "xyz")
        assert store.tally([], now=0.0, reads=reads) == [expected.get(key, 0) for key in reads]


class TestCeilings:
    def test_counts_and_reads_in_order(self, store: CounterStore) -> None:
        """Counted ceilings add 1, read ones change nothing; every value comes back in order."""
        store.incr("read", 4, now=0.0, ttl=TTL)
        ceilings = [Ceiling("a", 10, TTL), Ceiling("read", 10), Ceiling("absent", 10)]
        assert store.ceilings(ceilings, now=1.0) == [1, 4, 0]
        assert store.ceilings(ceilings, now=1.0) == [2, 4, 0]
        assert store.get("read", now=1.0) == 4 and store.get("absent", now=1.0) == 0

    def test_stops_after_the_first_over_its_limit(self, store: CounterStore) -> None:
        """The counter over its limit keeps its count; the ceilings after it are not touched."""
        store.incr("full", 3, now=0.0, ttl=TTL)
        ceilings = [Ceiling("first", 9, TTL), Ceiling("full", 3, TTL), Ceiling("after", 9, TTL)]
        assert store.ceilings(ceilings, now=0.0) == [1, 4]
        assert [store.get(k, now=0.0) for k in ("first", "full", "after")] == [1, 4, 0]
        assert store.ceilings([Ceiling("full", 3), Ceiling("after", 9, TTL)], now=0.0) == [4]

    def test_a_value_at_its_limit_goes_on(self, store: CounterStore) -> None:
        """Only a value over the limit stops: at the limit, the next ceiling is reached."""
        assert store.ceilings([Ceiling("x", 1, TTL), Ceiling("y", 0, TTL)], now=0.0) == [1, 1]
        assert store.ceilings([Ceiling("none", -1), Ceiling("y", 9, TTL)], now=0.0) == [0]

    def test_expired_counters_restart_and_read_as_zero(self, store: CounterStore) -> None:
        """An expired counter counts from zero with the ceiling's ttl, and reads as 0."""
        store.incr("old", 5, now=0.0, ttl=1.0)
        store.incr("gone", 5, now=0.0, ttl=1.0)
        assert store.ceilings([Ceiling("old", 9, 10.0), Ceiling("gone", 9)], now=2.0) == [1, 0]
        assert (store.get("old", now=12.0), store.get("old", now=12.5)) == (1, 0)

    def test_keeps_64_bit_values_exact(self, store: CounterStore) -> None:
        """A value past 2**53 (where Lua's doubles round) comes back exactly."""
        big = 2**62 + 1
        store.incr("big", big, now=0.0, ttl=TTL)
        assert store.ceilings([Ceiling("big", 2**63 - 1)], now=0.0) == [big]
        assert store.ceilings([Ceiling("big", 2**63 - 1, TTL)], now=0.0) == [big + 1]

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        rounds=st.lists(
            st.lists(
                st.tuples(st.sampled_from("xyz"), st.integers(-1, 4), st.booleans()),
                max_size=4,
            ),
            max_size=6,
        )
    )
    def test_any_sequence_agrees_with_incr_and_get(
        self, store: CounterStore, rounds: list[list[tuple[str, int, bool]]]
    ) -> None:
        """Random ceilings leave, and answer, what incr and get one by one predict."""
        prefix = f"ceil{uuid.uuid4().hex}:"  # the store outlives each example
        expected: dict[str, int] = {}
        for ceilings in rounds:
            values: list[int] = []
            for name, limit, counted in ceilings:
                key = prefix + name
                if counted:
                    expected[key] = expected.get(key, 0) + 1
                values.append(expected.get(key, 0))
                if values[-1] > limit:
                    break
            asked = [Ceiling(prefix + n, limit, TTL if c else None) for n, limit, c in ceilings]
            assert store.ceilings(asked, now=0.0) == values
        reads = tuple(prefix + name for name in "xyz")
        assert [store.get(key, now=0.0) for key in reads] == [expected.get(k, 0) for k in reads]

    @settings(max_examples=60, deadline=None)
    @given(
        rounds=st.lists(
            st.tuples(
                st.floats(0, 5),
                st.lists(
                    st.tuples(
                        st.sampled_from("xyz"),
                        st.integers(-1, 4),
                        st.none() | st.sampled_from([0.5, 2.0]),
                    ),
                    max_size=4,
                ),
            ),
            max_size=8,
        ),
        capacity=st.integers(1, 4),
    )
    def test_the_memory_store_agrees_with_the_generic_one(
        self, rounds: list[tuple[float, list[tuple[str, int, float | None]]]], capacity: int
    ) -> None:
        """Expiring, refilled, full: the memory store's one-lock ceilings leave and answer what
        the generic loop over incr and get does on another memory store."""
        fast, generic = (MemoryCounterStore(max_entries=capacity) for _ in range(2))
        now = 0.0
        for step, ceilings in rounds:
            now += step
            asked = [Ceiling(name, limit, ttl) for name, limit, ttl in ceilings]
            try:
                expected = OneStepCounters.ceilings(generic, asked, now=now)
            except StoreFull:
                with pytest.raises(StoreFull):
                    fast.ceilings(asked, now=now)
            else:
                assert fast.ceilings(asked, now=now) == expected
            assert [fast.get(k, now=now) for k in "xyz"] == [generic.get(k, now=now) for k in "xyz"]


class TestAhead:
    def test_values_are_there_by_the_next_store_call(self, store: CounterStore) -> None:
        """Read ahead: each key's value (0 if absent or expired) once another call answered."""
        store.incr("a", 3, now=0.0, ttl=TTL)
        store.incr("old", 3, now=0.0, ttl=1.0)
        found = store.ahead(["a", "old", "absent"], now=2.0)
        assert store.get("a", now=2.0) == 3
        assert found == {"a": 3, "old": 0, "absent": 0}


class TestPurge:
    def test_purge_deletes_expired_counters(self, store: CounterStore) -> None:
        """purge removes expired counters, returns how many, and keeps live ones."""
        store.incr("old", now=0.0, ttl=10.0)
        store.incr("older", now=0.0, ttl=5.0)
        store.incr("live", now=0.0, ttl=TTL)
        assert store.purge(11.0) == 2
        assert store.get("live", now=11.0) == 1

    def test_purge_of_empty_store_returns_zero(self, store: CounterStore) -> None:
        """Nothing to delete, nothing counted."""
        assert store.purge(1e9) == 0


class TestConcurrency:
    def test_parallel_incr_loses_no_update(self, store: CounterStore) -> None:
        """Eight threads incrementing 100 times each leave exactly 800."""
        run_together(8, lambda _: [store.incr("c", now=0.0, ttl=TTL) for _ in range(100)])
        assert store.get("c", now=0.0) == 800

    def test_parallel_add_within_never_exceeds_the_limit(self, store: CounterStore) -> None:
        """Eight threads racing add_within on one counter stop exactly at the limit."""

        def work(_: int) -> int:
            return sum(store.add_within("c", 1, 150, now=0.0, ttl=TTL) for _ in range(50))

        assert sum(run_together(8, work)) == 150
        assert store.get("c", now=0.0) == 150
