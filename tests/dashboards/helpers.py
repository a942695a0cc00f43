"""Reading what a page shows back into numbers, and the Overview's numbers from analytics."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from streamlit.testing.v1 import AppTest

from analytics import gates, metrics
from analytics.metrics import Filters
from dashboards.fmt import NO_RATE
from dashboards.settings import DEFAULT_CONFIRMATION_TTL_SECONDS

TTL = timedelta(seconds=DEFAULT_CONFIRMATION_TTL_SECONDS)
"""The confirmation TTL the dashboard runs with in the tests (the guard's default)."""


def parse_count(text: str) -> int:
    """``2,255`` -> 2255."""
    return int(text.replace(",", ""))


def parse_rate(text: str) -> float | None:
    """``36.4%`` -> 0.364; an em dash -> None."""
    return None if text == NO_RATE else float(text.rstrip("%")) / 100


@dataclass(frozen=True)
class Expected:
    """The Overview's numbers as analytics computes them."""

    calls: int
    rejection_rate: float | None
    recovery_rate: float | None
    replays: int
    loop_guards: int
    pending: int
    model_errors: float | None
    policy_refusals: float | None
    human_gates: float | None
    upstream_failures: float | None


def expected_overview(source: metrics.Source, filters: Filters) -> Expected:
    """Compute the Overview's numbers straight from analytics' query functions."""
    [total] = metrics.overview(source, filters)
    recovery = metrics.recovery_rate(source, filters)
    fixable = sum(r.rejected for r in recovery)
    [split] = gates.gate_rates(source, filters)
    return Expected(
        calls=total.calls,
        rejection_rate=total.rejected / total.calls,
        recovery_rate=sum(r.recovered for r in recovery) / fixable if fixable else None,
        replays=sum(r.replayed for r in metrics.replays(source, filters)),
        loop_guards=sum(g.calls for g in metrics.loop_guards(source, filters)),
        pending=gates.pending_approvals(source, filters, ttl=TTL).open,
        model_errors=split.model_errors / total.calls,
        policy_refusals=split.policy_refusals / total.calls,
        human_gates=split.human_gates / total.calls,
        upstream_failures=split.upstream_failures / total.calls,
    )


def shown(labels_to_values: dict[str, str]) -> Expected:
    """The Overview's numbers as the page shows them, parsed."""
    return Expected(
        calls=parse_count(labels_to_values["Calls"]),
        rejection_rate=parse_rate(labels_to_values["Rejection rate"]),
        recovery_rate=parse_rate(labels_to_values["Recovery rate"]),
        replays=parse_count(labels_to_values["Replays"]),
        loop_guards=parse_count(labels_to_values["Loop guards"]),
        pending=parse_count(labels_to_values["Pending approvals"]),
        model_errors=parse_rate(labels_to_values["Model errors"]),
        policy_refusals=parse_rate(labels_to_values["Policy refusals"]),
        human_gates=parse_rate(labels_to_values["Human gates"]),
        upstream_failures=parse_rate(labels_to_values["Upstream failures"]),
    )


def assert_same(page: Expected, expected: Expected) -> None:
    """Counts equal; rates equal to the 0.1% the page rounds them to."""
    assert (page.calls, page.replays, page.loop_guards, page.pending) == (
        expected.calls,
        expected.replays,
        expected.loop_guards,
        expected.pending,
    )
    for got, want in (
        (page.rejection_rate, expected.rejection_rate),
        (page.recovery_rate, expected.recovery_rate),
        (page.model_errors, expected.model_errors),
        (page.policy_refusals, expected.policy_refusals),
        (page.human_gates, expected.human_gates),
        (page.upstream_failures, expected.upstream_failures),
    ):
        assert (got is None) == (want is None)
        if got is not None and want is not None:
            assert abs(got - want) <= 0.0005 + 1e-12


_CODE_SPAN = re.compile(r"(`+) (.*?) \1(?!`)")


def unescape(markdown: str) -> str:
    """``markdown`` with the values :func:`dashboards.safe.text` put in code spans unwrapped."""
    return _CODE_SPAN.sub(lambda m: m.group(2), markdown)


def table_text(at: AppTest, index: int = 0) -> dict[str, list[str]]:
    """The ``index``-th ``st.table`` as the reader sees it: column -> cell texts."""
    frame = at.table[index].value
    return {str(c): [unescape(str(v)) for v in frame[c]] for c in frame.columns}
