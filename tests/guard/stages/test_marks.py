"""Session marks (guard.stages.marks): a re-read writes only what is new or due, and a value a
result showed stays usable as long as it did when every read rewrote every mark."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from examples.retail import (
    RETAIL_CODES,
    RetailBackend,
    RetailDeps,
    default_backend,
    retail_policy,
    retail_tools,
)
from examples.retail.backend import Variant
from guard import Code, Guard, Principal, Session
from guard.stages.marks import RecentMarks
from guard.stores.base import StoreFull
from guard.stores.memory import MemoryCounterStore
from guard.testing import ManualClock

TTL = 1_000.0
REFRESH = RecentMarks.refresh_after(TTL)
EXCHANGE = {
    "order_id": "#W2001",
    "item_ids": ["KB-RED-FULL"],
    "new_item_ids": ["KB-BLUE-FULL"],
    "payment_method_id": "credit_card_9231",
}


class CountingCounters(MemoryCounterStore):
    """The real memory store, counting the writes that reach it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.writes: list[str] = []

    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int:
        value = super().incr(key, amount, now=now, ttl=ttl)
        self.writes.append(key)
        return value


def chat(counters: CountingCounters, clock: ManualClock) -> tuple[Session, RetailBackend]:
    """Mia identified, on the retail store over ``counters``; nothing else read yet."""
    backend = default_backend()
    guard = Guard(
        tools=retail_tools(),
        policy=retail_policy(session_ttl=TTL, rate_limit=None, max_identical_calls=100),
        clock=clock,
        counters=counters,
        deps=RetailDeps(backend=backend),
        codes=RETAIL_CODES,
    )
    session = guard.session("chat", Principal.anonymous())
    look_up(session)
    return session, backend


def look_up(session: Session) -> None:
    found = session.execute(
        "find_user_id_by_name_zip", '{"first_name": "Mia", "last_name": "Li", "zip": "94110"}'
    )
    assert found.ok


def read_all(session: Session) -> None:
    for tool, args in (
        ("get_user_details", {}),
        ("get_order_details", {"order_id": "#W2001"}),
        ("get_product_details", {"product_id": "P-KEYBOARD"}),
    ):
        assert session.execute(tool, json.dumps(args)).ok, tool


def value_writes(counters: CountingCounters) -> list[str]:
    return [key for key in counters.writes if key.startswith(("value:", "seen:", "ran:"))]


class TestRereads:
    """Re-reading the same records does not rewrite their marks; new values are marked at once."""

    def test_a_reread_within_the_refresh_window_writes_no_marks(self) -> None:
        """The second read of three multi-value records writes no value, record or run mark."""
        counters, clock = CountingCounters(), ManualClock()
        session, _ = chat(counters, clock)
        read_all(session)
        first = len(value_writes(counters))
        assert first >= 9  # two methods, two items, three variants, the order, the lookup's run
        clock.advance(REFRESH / 2)
        read_all(session)
        assert len(value_writes(counters)) == first

    def test_a_value_new_in_a_reread_is_marked_and_usable_at_once(self) -> None:
        """A variant added since the first read is marked by the re-read, and the exchange to it
        passes the rules."""
        counters, clock = CountingCounters(), ManualClock()
        session, backend = chat(counters, clock)
        read_all(session)
        backend.products["P-KEYBOARD"].variants["KB-NEW-FULL"] = Variant(
            item_id="KB-NEW-FULL", options={"switch": "new"}, price_cents=12_000
        )
        before = len(value_writes(counters))
        read_all(session)
        assert value_writes(counters)[before:] == [
            "value:chat:get_product_details:variants.*.item_id:KB-NEW-FULL"
        ]
        exchange = session.execute(
            "exchange_delivered_order_items",
            json.dumps({**EXCHANGE, "new_item_ids": ["KB-NEW-FULL"]}),
        )
        assert exchange.ok and backend.side_effects == 1, exchange

    def test_marks_are_refreshed_once_due_and_outlive_the_latest_read(self) -> None:
        """Reads every half-TTL keep the marks alive past the first read's TTL: the exchange
        still passes at the end, as it did when every read rewrote every mark."""
        counters, clock = CountingCounters(), ManualClock()
        session, backend = chat(counters, clock)
        for _ in range(4):
            look_up(session)
            read_all(session)
            clock.advance(TTL / 2)
        clock.advance(TTL / 2 - REFRESH - 1)  # the latest read was TTL - REFRESH - 1 ago
        assert session.execute("exchange_delivered_order_items", json.dumps(EXCHANGE)).ok
        assert backend.side_effects == 1

    def test_an_unseen_value_is_refused_however_often_others_are_read(self) -> None:
        """The cache never answers a check: an id no result showed is PREREQUISITE_MISSING and
        the store is not written."""
        counters, clock = CountingCounters(), ManualClock()
        session, backend = chat(counters, clock)
        for _ in range(3):
            read_all(session)
        guessed = {**EXCHANGE, "new_item_ids": ["KB-GREEN-FULL"]}
        result = session.execute("exchange_delivered_order_items", json.dumps(guessed))
        assert result.code is Code.PREREQUISITE_MISSING and backend.side_effects == 0


class TestRecentMarks:
    """The cache itself: writes that failed are retried, and its memory is bounded."""

    def test_a_write_the_store_refused_is_written_on_the_next_read(self) -> None:
        """StoreFull on a mark: the next read tries that mark again instead of skipping it."""
        store, marks = CountingCounters(max_entries=2), RecentMarks()
        with pytest.raises(StoreFull):
            marks.mark(store, "s", "value:s:t:p:", ["a", "b", "c"], now=0.0, ttl=TTL)
        store.purge(10 * TTL)
        marks.mark(store, "s", "value:s:t:p:", ["a", "b", "c"], now=1.0, ttl=TTL)
        assert store.get("value:s:t:p:c", now=1.0) == 1

    def test_the_oldest_sessions_are_forgotten_first(self) -> None:
        """Past ``sessions`` sessions the first one's marks are written again on its next read."""
        store, marks = CountingCounters(), RecentMarks(sessions=2)
        for session in ("s1", "s2", "s3"):
            marks.mark(store, session, f"ran:{session}:t", [""], now=0.0, ttl=TTL)
        marks.mark(store, "s3", "ran:s3:t", [""], now=0.0, ttl=TTL)
        marks.mark(store, "s1", "ran:s1:t", [""], now=0.0, ttl=TTL)
        assert store.writes == ["ran:s1:t", "ran:s2:t", "ran:s3:t", "ran:s1:t"]

    @settings(max_examples=200, deadline=None)
    @given(
        reads=st.lists(
            st.tuples(
                st.floats(0, TTL / 2),
                st.sets(st.sampled_from("abcdef"), max_size=6),
            ),
            min_size=1,
            max_size=12,
        ),
        wait=st.floats(0, 2 * TTL),
    )
    def test_every_value_read_lives_ttl_minus_refresh_after_its_latest_read(
        self, reads: list[tuple[float, set[str]]], wait: float
    ) -> None:
        """Any reads at any times: a value is marked in the store exactly until at least TTL -
        REFRESH after the latest read that showed it, and a value never shown is never marked."""
        store, marks, now, last = CountingCounters(), RecentMarks(), 0.0, {}
        for gap, values in reads:
            now += gap
            marks.mark(store, "s", "value:s:t:p:", values, now=now, ttl=TTL)
            last.update(dict.fromkeys(values, now))
        at = now + wait
        for value in "abcdef":
            live = store.get(f"value:s:t:p:{value}", now=at) > 0
            if value not in last:
                assert not live
            elif at - last[value] < TTL - REFRESH:
                assert live
            elif at - last[value] > TTL:
                assert not live
