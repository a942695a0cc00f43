"""Runs of NOT_FOUND on neighbouring ids: an id enumeration reads as one flagged run."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from analytics.reconstruct import CallSummary, enumeration_runs
from analytics.render import enumeration_lines

T0 = datetime(2026, 1, 1)


def call(
    step: int, arguments: str, *, code: str = "NOT_FOUND", tool: str = "get_order"
) -> CallSummary:
    return CallSummary(
        trace_id=f"{step:032x}",
        span_id=f"{step:016x}",
        start_time=T0 + timedelta(seconds=step),
        duration_ms=0.1,
        service="svc",
        session="s1",
        principal="p_1",
        step=step,
        tool=tool,
        call_id=f"c{step}",
        code=code,
        ok=code == "OK",
        rejected_stage=None if code == "OK" else "rules",
        replayed=False,
        confirmed=False,
        resumed=False,
        approval_id=None,
        approval_outcome=None,
        attempts=0,
        outcome="not_applied",
        arguments=arguments,
    )


def probe(ids: list[int], **kwargs: str) -> list[CallSummary]:
    return [call(i + 1, f'{{"order_id":"ORD-{n}"}}', **kwargs) for i, n in enumerate(ids)]


class TestRuns:
    def test_the_issue_s_enumeration_is_one_run(self) -> None:
        """ORD-9085 ... ORD-9096, each NOT_FOUND: one run of twelve, first and last named."""
        [run] = enumeration_runs(probe(list(range(9085, 9097))))
        assert len(run.calls) == 12 and "ORD-9085" in run.first and "ORD-9096" in run.last
        [line] = enumeration_lines(probe(list(range(9085, 9097))))
        assert "12 NOT_FOUND calls of get_order" in line and "steps 1-12" in line

    def test_what_breaks_a_run(self) -> None:
        """A far jump, another tool, another code, or a change besides the number breaks it."""
        calls = probe([100, 101, 102])
        assert len(enumeration_runs(calls)) == 1
        assert enumeration_runs(probe([100, 101, 500, 501])) == []  # two runs of two
        assert enumeration_runs([*calls[:2], replace(calls[2], tool="get_refund_status")]) == []
        assert enumeration_runs([*calls[:2], replace(calls[2], code="OK")]) == []
        changed = replace(calls[2], arguments='{"order_id":"ORD-102","note":"x"}')
        assert enumeration_runs([*calls[:2], changed]) == []
        two_numbers = replace(calls[2], arguments='{"order_id":"ORD-102"}'.replace("{", '{"n":7,'))
        assert enumeration_runs([*calls[:2], two_numbers]) == []

    def test_repeats_are_not_enumeration(self) -> None:
        """The same id again is a loop, not a probe."""
        assert enumeration_runs(probe([7, 7, 7, 7])) == []

    @given(st.lists(st.integers(1, 9999), min_size=0, max_size=30))
    def test_every_run_is_consecutive_neighbours(self, ids: list[int]) -> None:
        """Each flagged run is at least three calls whose ids move by 1 to 10 each step."""
        for run in enumeration_runs(probe(ids)):
            steps = [c.step or 0 for c in run.calls]
            assert len(steps) >= 3 and steps == list(range(steps[0], steps[0] + len(steps)))
            numbers = [ids[s - 1] for s in steps]
            assert all(0 < abs(b - a) <= 10 for a, b in pairwise(numbers))
