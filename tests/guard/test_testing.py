"""The fakes guard.testing ships behave as documented."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from guard.testing import ManualClock


class TestManualClock:
    @given(moves=st.lists(st.floats(min_value=0.0, max_value=0.01), min_size=1, max_size=20))
    @settings(max_examples=50, deadline=None)
    def test_forward_moves_never_take_time_ns_back(self, moves: list[float]) -> None:
        """A backoff shorter than the real time already counted does not rewind span timestamps."""
        clock = ManualClock()
        seen = clock.time_ns()
        for seconds in moves:
            deadline = time.perf_counter_ns() + 200_000  # let some real time pass first
            while time.perf_counter_ns() < deadline:
                pass
            before = clock.time_ns()
            clock.sleep(seconds)
            after = clock.time_ns()
            assert after >= before >= seen
            seen = after

    def test_a_long_move_lands_where_it_was_put(self) -> None:
        """A move longer than the real time elapsed puts time_ns at the manual time."""
        clock = ManualClock(start=1_000.0)
        clock.advance(60.0)
        assert 1_060 * 10**9 <= clock.time_ns() < 1_061 * 10**9
        assert clock.now() == 1_060.0

    def test_a_step_back_goes_back(self) -> None:
        """A clock stepped back on purpose moves time_ns back with it."""
        clock = ManualClock(start=1_000.0)
        before = clock.time_ns()
        clock.advance(-30.0)
        assert clock.time_ns() < before - 29 * 10**9
