"""Everything the pages show, fetched through analytics' query functions and nothing else.

No SQL here: each function calls :mod:`analytics.metrics` or :mod:`analytics.reconstruct` and, at
most, adds up their rows (e.g. the per-tool recovery counts into one rate for the Overview). The
pages format and draw what these return.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TypeVar

from analytics import (
    advisories,
    alerts,
    call_latency,
    deciders,
    gates,
    metrics,
    reconstruct,
    shadow,
)
from analytics.advisories import WarningCount
from analytics.alerts import DEFAULT_RULES, AlertResult, Rule
from analytics.call_latency import CallLatency
from analytics.gates import CodeKind, GateRates, HumanGateReason, PendingApprovals
from analytics.metrics import (
    CallCount,
    ConfirmationFunnel,
    FilterOptions,
    Filters,
    InvalidField,
    LoopGuard,
    Recovery,
    RejectionRate,
    Replays,
    StageLatency,
    StuckSession,
)
from analytics.shadow import WouldHaveRejected

from .source import Source

__all__ = [
    "FUNNEL_STEPS",
    "TAINTED_CONTEXT",
    "ConfirmationsData",
    "FunnelPoint",
    "Headline",
    "LatencyData",
    "LoopsData",
    "OverviewData",
    "RecoveryData",
    "RejectionsData",
    "TraceLookup",
    "TrendPoint",
    "confirmations",
    "examples",
    "filter_options",
    "headline",
    "latency",
    "lookup",
    "loops",
    "named_deciders",
    "overview",
    "previous_window",
    "recovery",
    "rejections",
    "taint_source",
    "trend",
]

T = TypeVar("T")


def filter_options(source: Source) -> FilterOptions:
    """The services, tools and principals in the source, and its first and last call."""
    return metrics.filter_options(source)


# ---------------------------------------------------------------------------------------------
# Overview


@dataclass(frozen=True, kw_only=True, slots=True)
class Headline:
    """The Overview's numbers over the filtered calls (or one bucket of them)."""

    calls: int
    gates: GateRates
    """The calls that did not run, by kind: model errors, policy refusals, human gates, upstream
    failures (:mod:`analytics.gates`); they add up to the rejection rate's numerator."""
    fixable_rejected: int
    """Calls rejected with a code the model can fix (the recovery rate's denominator)."""
    recovered: int
    replays: int
    loop_guards: int
    """Calls stopped by LOOP_DETECTED, STEP_LIMIT or VALIDATION_BUDGET_EXHAUSTED."""

    @property
    def rejected(self) -> int:
        """Calls that did not end OK, gates included (the rejection rate's numerator)."""
        return self.gates.rejected

    @property
    def rejection_rate(self) -> float | None:
        """rejected / calls: the combined figure of docs/metrics.md."""
        return self.rejected / self.calls if self.calls else None

    def rate(self, kind: str) -> float | None:
        """Calls of one of :data:`analytics.gates.GATE_KINDS` / calls."""
        return self.gates.rate(kind)

    @property
    def recovery_rate(self) -> float | None:
        """recovered / fixable_rejected."""
        return self.recovered / self.fixable_rejected if self.fixable_rejected else None


@dataclass(frozen=True, kw_only=True, slots=True)
class TrendPoint:
    """The Overview's numbers in one time bucket."""

    bucket: datetime
    headline: Headline


@dataclass(frozen=True, kw_only=True, slots=True)
class OverviewData:
    """The Overview page: the numbers, their trend, the split per tool, open approvals."""

    headline: Headline
    trend: list[TrendPoint]
    tools: list[GateRates]
    """Per tool: model errors, policy refusals, human gates, upstream failures."""
    pending: PendingApprovals
    """Approvals still waiting for a human (``open``) and those that lapsed unanswered."""
    previous: Headline | None = None
    """The same numbers over the window of the same length just before (None: "All time", or
    nothing then): the tiles' deltas."""
    alerts: tuple[AlertResult, ...] = ()
    """Every alert rule evaluated as ``callgate alerts`` does (firing ones first)."""


def overview(
    source: Source,
    filters: Filters,
    bucket: timedelta,
    *,
    confirmation_ttl: timedelta,
    rules: Sequence[Rule] = DEFAULT_RULES,
    last: datetime | None = None,
) -> OverviewData | None:
    """The Overview's numbers; None when no call matches the filters.

    ``last`` is the latest call in the source: the end of a window that has no end of its own,
    from which the previous window of the same length is found.
    """
    points = _headlines(source, filters, None)
    if not points:
        return None
    earlier = previous_window(filters, last)
    before = _headlines(source, earlier, None) if earlier is not None else []
    return OverviewData(
        headline=points[0].headline,
        trend=_headlines(source, filters, bucket),
        tools=gates.gate_rates(source, filters, by="tool"),
        pending=gates.pending_approvals(source, filters, ttl=confirmation_ttl),
        previous=before[0].headline if before else None,
        alerts=tuple(alerts.evaluate(source, rules, confirmation_ttl=confirmation_ttl)),
    )


def previous_window(filters: Filters, last: datetime | None) -> Filters | None:
    """The window of the same length ending where ``filters``' starts; None without a start."""
    if filters.start is None:
        return None
    end = filters.end or (last + timedelta(microseconds=1) if last is not None else None)
    if end is None or end <= filters.start:
        return None
    return replace(filters, start=filters.start - (end - filters.start), end=filters.start)


def headline(source: Source, filters: Filters) -> Headline | None:
    """The Overview's numbers; None when no call matches the filters."""
    points = _headlines(source, filters, None)
    return points[0].headline if points else None


def trend(source: Source, filters: Filters, bucket: timedelta) -> list[TrendPoint]:
    """The Overview's numbers per bucket, for every bucket that has calls."""
    return _headlines(source, filters, bucket)


def _headlines(source: Source, filters: Filters, bucket: timedelta | None) -> list[TrendPoint]:
    split = gates.gate_rates(source, filters, bucket=bucket)
    recovery_rows = metrics.recovery_rate(source, filters, bucket=bucket)
    fixable = _sum_by(recovery_rows, lambda r: r.rejected)
    recovered = _sum_by(recovery_rows, lambda r: r.recovered)
    replays = _sum_by(metrics.replays(source, filters, bucket=bucket), lambda r: r.replayed)
    guards = _sum_by(metrics.loop_guards(source, filters, bucket=bucket), lambda r: r.calls)
    return [
        TrendPoint(
            bucket=g.bucket or datetime.min,
            headline=Headline(
                calls=g.calls,
                gates=g,
                fixable_rejected=fixable.get(g.bucket, 0),
                recovered=recovered.get(g.bucket, 0),
                replays=replays.get(g.bucket, 0),
                loop_guards=guards.get(g.bucket, 0),
            ),
        )
        for g in split
    ]


def _sum_by(rows: Iterable[T], value: Callable[[T], int]) -> dict[datetime | None, int]:
    """Add ``value(row)`` up per bucket."""
    out: dict[datetime | None, int] = defaultdict(int)
    for row in rows:
        out[getattr(row, "bucket", None)] += value(row)
    return dict(out)


# ---------------------------------------------------------------------------------------------
# Rejections


@dataclass(frozen=True, kw_only=True, slots=True)
class RejectionsData:
    """The Rejections page."""

    cells: list[RejectionRate]
    """Per (tool, code): calls of the tool that ended with the code, over calls of the tool."""
    tools: list[RejectionRate]
    """Per tool: rejected calls over calls."""
    fields: list[InvalidField]
    """Top failing fields behind INVALID_ARGUMENTS."""
    counts: list[CallCount]
    """Calls per bucket, tool and code (the heatmap's trend)."""
    kinds: list[CodeKind]
    """Every code with its stage and kind, in pipeline order (the heatmap's columns)."""
    warnings: list[WarningCount]
    """Warnings that let calls through, per tool and code."""
    shadow: list[WouldHaveRejected]
    """What shadow mode would have refused, per tool and code: apart from enforced rejections."""
    shadow_waits: list[WouldHaveRejected] = field(default_factory=list)
    """Shadow calls that would only have waited for a human: apart from the refusals."""

    def kind_of(self, code: str | None) -> str:
        """The kind (:data:`analytics.gates.GATE_KINDS`) of ``code``; policy refusal if unknown."""
        return next((k.kind for k in self.kinds if k.code == code), "policy_refusal")


def rejections(
    source: Source, filters: Filters, *, min_calls: int, bucket: timedelta
) -> RejectionsData:
    """Rejection rates per tool and code, per tool, the top failing fields, and their trend."""
    return RejectionsData(
        cells=metrics.rejection_rate(source, filters, by="tool_code", min_calls=min_calls),
        tools=metrics.rejection_rate(source, filters, by="tool", min_calls=min_calls),
        fields=metrics.invalid_fields(source, filters, limit=10),
        counts=metrics.call_counts(source, filters, bucket=bucket),
        kinds=gates.code_kinds(source, filters),
        warnings=advisories.warning_counts(source, filters),
        shadow=shadow.would_have_rejected(source, filters),
        shadow_waits=shadow.would_have_waited(source, filters),
    )


def examples(
    source: Source, filters: Filters, *, tool: str, code: str, limit: int = 10
) -> list[metrics.CallRef]:
    """The newest calls of ``tool`` that ended with ``code`` and match ``filters``: traces to open."""
    return metrics.calls_matching(source, filters, code=code, tool=tool, limit=limit)


# ---------------------------------------------------------------------------------------------
# Recovery


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryData:
    """The Recovery page."""

    tools: list[Recovery]
    codes: list[metrics.CodeRecovery]
    trend: list[Recovery]
    """Per bucket and tool."""
    never_recovered: list[metrics.CallRef]
    """The newest fixable rejections that were not fixed within ``k`` calls."""
    k: int


def recovery(
    source: Source, filters: Filters, *, k: int, min_calls: int, bucket: timedelta
) -> RecoveryData:
    """Recovery rate per tool and per code, per tool and bucket, and the calls never recovered."""
    return RecoveryData(
        tools=metrics.recovery_rate(source, filters, k=k, min_calls=min_calls),
        codes=metrics.recovery_by_code(source, filters, k=k, min_calls=min_calls),
        trend=metrics.recovery_rate(source, filters, k=k, min_calls=min_calls, bucket=bucket),
        never_recovered=metrics.unrecovered_calls(source, filters, k=k, limit=50),
        k=k,
    )


# ---------------------------------------------------------------------------------------------
# Confirmations

FUNNEL_STEPS: tuple[tuple[str, str, str], ...] = (
    ("required", "Required", "calls that asked a human"),
    ("approved_executed", "Executed", "approved, and the resumed call ran"),
    ("approved_refused", "Refused", "approved, but refused on re-check"),
    ("denied", "Denied", "the human said no"),
    ("expired", "Expired", "nobody decided in time"),
    ("pending", "Pending", "no decision yet"),
)
"""The funnel's fields of :class:`~analytics.metrics.ConfirmationFunnel`: label, meaning."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FunnelPoint:
    """The funnel summed over tools, for one bucket (or the whole window)."""

    bucket: datetime | None
    counts: dict[str, int]
    """Field of :data:`FUNNEL_STEPS` -> calls."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfirmationsData:
    """The Confirmations page."""

    tools: list[ConfirmationFunnel]
    total: FunnelPoint
    """The funnel summed over tools; its ``pending`` counts only approvals still open and its
    ``expired`` includes those that lapsed unanswered (as :func:`metrics.confirmation_funnel`)."""
    trend: list[FunnelPoint]
    pending: PendingApprovals
    reasons: list[HumanGateReason] = field(default_factory=list)
    """Human gates by why they were asked: taint, untrusted value, risk
    (:func:`analytics.gates.human_gates_by_reason`)."""


def confirmations(
    source: Source, filters: Filters, *, bucket: timedelta, confirmation_ttl: timedelta
) -> ConfirmationsData:
    """The confirmation funnel per tool, in total, and per bucket; open vs lapsed approvals."""
    tools = metrics.confirmation_funnel(source, filters, ttl=confirmation_ttl)
    trend = metrics.confirmation_funnel(source, filters, bucket=bucket, ttl=confirmation_ttl)
    return ConfirmationsData(
        tools=tools,
        pending=gates.pending_approvals(source, filters, ttl=confirmation_ttl),
        reasons=gates.human_gates_by_reason(source, filters),
        total=_funnel_sum(None, tools),
        trend=[_funnel_sum(b, rows) for b, rows in _group(trend)],
    )


def _funnel_sum(bucket: datetime | None, rows: list[ConfirmationFunnel]) -> FunnelPoint:
    return FunnelPoint(
        bucket=bucket,
        counts={name: sum(getattr(r, name) for r in rows) for name, _, _ in FUNNEL_STEPS},
    )


def _group(
    rows: list[ConfirmationFunnel],
) -> list[tuple[datetime | None, list[ConfirmationFunnel]]]:
    groups: dict[datetime | None, list[ConfirmationFunnel]] = {}
    for row in rows:
        groups.setdefault(row.bucket, []).append(row)
    return list(groups.items())


# ---------------------------------------------------------------------------------------------
# Loops and replays


@dataclass(frozen=True, kw_only=True, slots=True)
class LoopsData:
    """The Loops and replays page."""

    guards: list[LoopGuard]
    replays: list[Replays]
    sessions: list[StuckSession]
    trend: list[LoopGuard]


def loops(source: Source, filters: Filters, *, bucket: timedelta, limit: int) -> LoopsData:
    """Loop guards and replays per tool, the sessions they hit, and loop guards per bucket."""
    return LoopsData(
        guards=metrics.loop_guards(source, filters),
        replays=metrics.replays(source, filters),
        sessions=metrics.stuck_sessions(source, filters, limit=limit),
        trend=metrics.loop_guards(source, filters, bucket=bucket),
    )


# ---------------------------------------------------------------------------------------------
# Latency


@dataclass(frozen=True, kw_only=True, slots=True)
class LatencyData:
    """The Latency page."""

    tools: list[CallLatency]
    """Call latency per tool over the window (busiest tool first)."""
    tool_trend: list[CallLatency]
    stages: list[StageLatency]
    trend: list[StageLatency]


def latency(source: Source, filters: Filters, *, bucket: timedelta) -> LatencyData:
    """Call latency per tool and stage latency, over the window and per bucket."""
    return LatencyData(
        tools=call_latency.call_latency(source, filters),
        tool_trend=call_latency.call_latency(source, filters, bucket=bucket),
        stages=metrics.stage_latency(source, filters),
        trend=metrics.stage_latency(source, filters, bucket=bucket),
    )


# ---------------------------------------------------------------------------------------------
# Trace explorer


TraceLookup = reconstruct.Lookup
"""What a search found (:class:`analytics.reconstruct.Lookup`)."""


def lookup(source: Source, query: str) -> TraceLookup:
    """Find ``query`` as a trace id, then a session, then a call id, each exact or by an
    unambiguous prefix: the same rule as ``callgate trace`` (:func:`analytics.reconstruct.lookup`).
    An ambiguous prefix raises :class:`analytics.reconstruct.AmbiguousIdError`."""
    return reconstruct.lookup(source, query)


def named_deciders(
    view: reconstruct.TraceView, store: str | None
) -> tuple[reconstruct.TraceView, str | None]:
    """``view`` with its deciders named from the approvals ``store`` (as ``callgate trace
    --store``), and the one-line reason when the store could not be read."""
    if not store:
        return view, None
    try:
        names = deciders.decider_names(store, deciders.approval_ids(view))
    except deciders.StoreUnreadable as exc:
        return view, str(exc)
    return deciders.with_deciders(view, names, os.environ.get("CALLGATE_MASKING_KEY")), None


TAINTED_CONTEXT = "TAINTED_CONTEXT"
"""The code of a write held because its session read untrusted text."""


def taint_source(source: Source, view: reconstruct.TraceView) -> reconstruct.CallSummary | None:
    """For a trace whose call (or the call it resumes) was held as TAINTED_CONTEXT: the call
    that tainted the session (analytics' ``TraceView.tainted_by`` / ``tainting_call``)."""
    if view.tainted_by:
        return view.tainted_by[0]
    held = next((c for c in view.approvals if c.code == TAINTED_CONTEXT), None)
    return reconstruct.tainting_call(source, held) if held is not None else None
