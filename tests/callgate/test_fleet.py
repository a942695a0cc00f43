"""The demo's fleet decides alike whenever it runs: its day starts at a UTC midnight."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import callgate.fleet as fleet
from callgate.fleet import DAY, Fleet, last_whole_day

MIDNIGHT = 1_764_633_600.0  # 2025-12-02T00:00:00Z


@given(st.floats(min_value=MIDNIGHT, max_value=MIDNIGHT + 400 * DAY))
def test_the_day_is_a_whole_utc_day_that_ended_an_hour_ago(now: float) -> None:
    start = last_whole_day(now)
    assert start % DAY == 0
    assert start + DAY <= now - 3_600 < start + 2 * DAY


def test_a_run_decides_alike_at_any_hour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs started at 01:30, 05:00 and 13:00 UTC count the same decisions per tool and code
    (with the day ending an hour before the run, 01:30 counted 605 calls, 05:00 and 13:00 606)."""
    tallies = []
    for hour in (1.5, 5.0, 13.0):
        now = MIDNIGHT + 10 * DAY + hour * 3_600
        monkeypatch.setattr(fleet.time, "time", lambda now=now: now)
        tallies.append(Fleet(sessions=200).run().by_tool_and_code())
    assert tallies[0] == tallies[1] == tallies[2]
    assert sum(tallies[0].values()) > 500
