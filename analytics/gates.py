"""Gates apart from errors: every call that did not run, by who can act on it.

The rejection rate (:func:`analytics.rejections.rejection_rate`) counts every call that is not OK,
so a human approval the policy asks for on purpose reads as a failure next to a malformed argument.
This module splits the same calls into four kinds that add up to it. Definitions (also in
docs/metrics.md, "Gates apart from errors"); each call that is not OK is exactly one of:

- **human gate**: ``guard.approval.outcome`` is ``pending``, ``denied`` or ``expired``. The call
  waits for a human, or a human said no, or nobody decided in time (``CONFIRMATION_REQUIRED``,
  ``TAINTED_CONTEXT``, ``CONFIRMATION_DENIED``, ``CONFIRMATION_EXPIRED``). Working as designed.
- **model error**: otherwise, ``guard.fixable`` is true: the model can fix the call by resending it
  corrected (``INVALID_ARGUMENTS``, ``NOT_FOUND``, ``UNKNOWN_TOOL``, ...). What prompts and tool
  descriptions can improve.
- **upstream failure**: otherwise, the call was rejected at the ``execute`` stage
  (``guard.rejected_stage``): the API failed, timed out or refused (``UPSTREAM_UNAVAILABLE``,
  ``TIMEOUT``, ...). What the API's owners page on.
- **policy refusal**: every other call that is not OK: the guard refused it by budget, permission,
  loop, rule or policy (``POLICY_LIMIT``, ``LOOP_DETECTED``, ``TOOL_NOT_ALLOWED``, ...).

Each rate is calls of the kind / all calls (in the filter). The kind is read from the call span's
attributes only (analytics never imports the guard's code table), so domain codes fall in place.

:func:`pending_approvals` counts the approvals still open: asked, not decided, and not older than
the confirmation TTL (older ones have expired, whether or not a resumption recorded it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from .confirmations import DEFAULT_CONFIRMATION_TTL, data_now
from .dialect import DUCKDB, Dialect
from .query import (
    ALL,
    Filters,
    Source,
    SqlParams,
    backend_of,
    bucket_expr,
    where_clause,
)

__all__ = [
    "ALL_KINDS",
    "GATE_KINDS",
    "GATE_REASONS",
    "KIND_SQL",
    "CodeKind",
    "GateRates",
    "GateShare",
    "HumanGateReason",
    "PendingApprovals",
    "code_kinds",
    "code_kinds_query",
    "gate_rates",
    "gate_rates_query",
    "gate_shares",
    "human_gates_by_reason",
    "human_gates_by_reason_query",
    "pending_approvals",
    "pending_approvals_query",
]

GATE_KINDS: tuple[str, ...] = ("model_error", "policy_refusal", "human_gate", "upstream_failure")
"""The kinds of calls that are not OK, in the order pages and reports show them."""

KIND_SQL = """CASE
    WHEN coalesce(ok, false) THEN 'ok'
    WHEN approval_outcome IN ('pending', 'denied', 'expired') THEN 'human_gate'
    WHEN coalesce(fixable, false) THEN 'model_error'
    WHEN rejected_stage = 'execute' THEN 'upstream_failure'
    ELSE 'policy_refusal'
END"""
"""The kind of a row of ``calls``: ``ok`` or one of :data:`GATE_KINDS` (same SQL on both engines)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GateRates:
    """Calls that did not run, by kind, over all calls (of the tool, when grouped by tool)."""

    bucket: datetime | None
    tool: str | None
    """The tool, or None over all tools."""
    calls: int
    model_errors: int
    policy_refusals: int
    human_gates: int
    upstream_failures: int

    @property
    def rejected(self) -> int:
        """All calls that are not OK: the rejection rate's numerator."""
        return self.model_errors + self.policy_refusals + self.human_gates + self.upstream_failures

    def rate(self, kind: str) -> float | None:
        """Calls of ``kind`` (one of :data:`GATE_KINDS`) / calls; None without calls."""
        count: int = getattr(self, _FIELDS[kind])
        return count / self.calls if self.calls else None


_FIELDS = {
    "model_error": "model_errors",
    "policy_refusal": "policy_refusals",
    "human_gate": "human_gates",
    "upstream_failure": "upstream_failures",
}


def gate_rates_query(
    filters: Filters,
    d: Dialect = DUCKDB,
    *,
    by: Literal["all", "tool"] = "all",
    bucket: timedelta | None = None,
) -> SqlParams:
    """Classify each filtered call with :data:`KIND_SQL` and count the kinds per group."""
    where, params = where_clause(filters, d)
    tool = "tool" if by == "tool" else "NULL"
    counts = ",\n               ".join(
        f"sum(CASE WHEN kind = '{kind}' THEN 1 ELSE 0 END) AS {field}"
        for kind, field in _FIELDS.items()
    )
    return (
        f"""
        SELECT bucket, tool, count(*) AS calls,
               {counts}
        FROM (
            SELECT {bucket_expr(d, bucket)} AS bucket, {tool} AS tool, {KIND_SQL} AS kind
            FROM {d.calls} {where}
        ) AS classified
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        params,
    )


def gate_rates(
    source: Source,
    filters: Filters = ALL,
    *,
    by: Literal["all", "tool"] = "all",
    bucket: timedelta | None = None,
) -> list[GateRates]:
    """Model errors, policy refusals, human gates and upstream failures, over all calls or per tool.

    Definition: see the module docstring (docs/metrics.md, "Gates apart from errors"). The four
    counts add up to the calls that are not OK; each rate is its count over ``calls``.
    """
    b = backend_of(source)
    rows = b.fetch(*gate_rates_query(filters, b.dialect, by=by, bucket=bucket))
    return [
        GateRates(
            bucket=r["bucket"],
            tool=r["tool"],
            calls=int(r["calls"]),
            **{field: int(r[field] or 0) for field in _FIELDS.values()},
        )
        for r in rows
        if r["calls"]
    ]


ALL_KINDS = "rejected (all kinds)"
"""The ``kind`` of :class:`GateShare` rows that add the four up: the combined rejection rate."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GateShare:
    """One kind's share of the calls: a row of ``callgate report`` (narrow enough for 80 columns)."""

    bucket: datetime | None
    tool: str | None
    kind: str
    """One of :data:`GATE_KINDS`, or :data:`ALL_KINDS`."""
    calls: int
    """Calls of the kind."""
    of_calls: int
    """All calls (of the tool): the denominator."""
    rate: float | None


def gate_shares(
    source: Source,
    filters: Filters = ALL,
    *,
    by: Literal["all", "tool"] = "all",
    bucket: timedelta | None = None,
) -> list[GateShare]:
    """:func:`gate_rates` as one row per kind, then the four added up (:data:`ALL_KINDS`)."""
    out: list[GateShare] = []
    for r in gate_rates(source, filters, by=by, bucket=bucket):
        counts = [(kind, int(getattr(r, _FIELDS[kind]))) for kind in GATE_KINDS]
        for kind, count in [*counts, (ALL_KINDS, r.rejected)]:
            if by == "tool" and not count and kind != ALL_KINDS:
                continue
            out.append(
                GateShare(
                    bucket=r.bucket,
                    tool=r.tool,
                    kind=kind,
                    calls=count,
                    of_calls=r.calls,
                    rate=count / r.calls if r.calls else None,
                )
            )
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class CodeKind:
    """A code that ended calls, the stage that ended them with it, and its kind."""

    code: str
    stage: str | None
    """The stage that most often rejected calls with the code (``guard.rejected_stage``)."""
    kind: str
    """One of :data:`GATE_KINDS` (the most frequent kind among its calls)."""
    calls: int


def code_kinds_query(filters: Filters, d: Dialect = DUCKDB) -> SqlParams:
    """Per code (not OK), per (stage, kind): how many calls; the caller keeps the most frequent."""
    where, params = where_clause(filters, d, extra=["NOT coalesce(ok, false)", "code IS NOT NULL"])
    return (
        f"""
        SELECT code, rejected_stage AS stage, {KIND_SQL} AS kind, count(*) AS calls
        FROM {d.calls} {where}
        GROUP BY 1, 2, 3
        """,
        params,
    )


def code_kinds(source: Source, filters: Filters = ALL) -> list[CodeKind]:
    """Every code that ended a call without running it, with its stage and kind.

    Sorted by pipeline stage (the span contract's order), then code: the order in which a call
    meets them. The stage and kind are the most frequent among the code's calls (a code belongs
    to one stage; the kind can vary, e.g. a resumed call refused on re-check).
    """
    from .latency import PIPELINE_STAGES

    b = backend_of(source)
    best: dict[str, tuple[int, str | None, str]] = {}
    totals: dict[str, int] = {}
    stage_votes: dict[str, dict[str | None, int]] = {}
    for r in b.fetch(*code_kinds_query(filters, b.dialect)):
        code, calls = str(r["code"]), int(r["calls"])
        totals[code] = totals.get(code, 0) + calls
        votes = stage_votes.setdefault(code, {})
        votes[r["stage"]] = votes.get(r["stage"], 0) + calls
        if calls > best.get(code, (0, None, ""))[0]:
            best[code] = (calls, r["stage"], str(r["kind"]))
    order = {s: i for i, s in enumerate(PIPELINE_STAGES)}
    out = [
        CodeKind(
            code=code,
            stage=max(stage_votes[code].items(), key=lambda kv: kv[1])[0],
            kind=best[code][2],
            calls=totals[code],
        )
        for code in totals
    ]
    out.sort(key=lambda c: (order.get(c.stage or "", len(order)), c.code))
    return out


GATE_REASONS: dict[str, str] = {
    "TAINTED_CONTEXT": "taint",
    "UNTRUSTED_VALUE": "untrusted value",
    "CONFIRMATION_REQUIRED": "risk",
}
"""Why a human was asked (``guard.approval.reason``), as pages name it: untrusted text anywhere
in the session, a sink argument no trusted source vouches for, a risky call (fixed or by
arguments). A reason outside this map (spans written before the attribute) reads ``other``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HumanGateReason:
    """Human gates asked for one reason (and tool): what the approvals cost, by why."""

    reason: str
    """``taint``, ``untrusted value``, ``risk`` or ``other`` (:data:`GATE_REASONS`)."""
    tool: str | None
    """The tool, or None over all tools."""
    asked: int
    """Calls that asked a human (``guard.approval.outcome = pending``, not a resumption)."""
    approved: int
    denied: int
    expired: int
    """Decisions recorded by the resumptions of those approvals."""


def human_gates_by_reason_query(
    filters: Filters, d: Dialect = DUCKDB, *, by: Literal["all", "tool"] = "all"
) -> SqlParams:
    """Each asking call with its reason (``guard.approval.reason``; for spans written before it,
    its code, which was the reason), then the decision its resumption recorded, counted per reason
    (and tool). Decisions are matched by approval id, in any time window."""
    where, params = where_clause(
        filters,
        d,
        extra=[
            "approval_outcome = 'pending'",
            "approval_id IS NOT NULL",
            "NOT coalesce(resumed, false)",
        ],
    )
    reasons = " ".join(f"WHEN '{code}' THEN '{name}'" for code, name in GATE_REASONS.items())
    tool = "tool" if by == "tool" else "NULL"
    return (
        f"""
        SELECT CASE coalesce(asked.approval_reason, asked.code) {reasons} ELSE 'other' END
                   AS reason,
               {tool} AS tool,
               count(*) AS asked,
               sum(CASE WHEN decided.outcome = 'approved' THEN 1 ELSE 0 END) AS approved,
               sum(CASE WHEN decided.outcome = 'denied' THEN 1 ELSE 0 END) AS denied,
               sum(CASE WHEN decided.outcome = 'expired' THEN 1 ELSE 0 END) AS expired
        FROM (
            SELECT approval_id, min(approval_reason) AS approval_reason, min(code) AS code,
                   min(tool) AS tool
            FROM {d.calls} {where}
            GROUP BY approval_id
        ) AS asked
        LEFT JOIN (
            SELECT approval_id, min(approval_outcome) AS outcome
            FROM {d.calls} WHERE resumed AND approval_id IS NOT NULL
            GROUP BY approval_id
        ) AS decided ON decided.approval_id = asked.approval_id
        GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2
        """,
        params,
    )


def human_gates_by_reason(
    source: Source, filters: Filters = ALL, *, by: Literal["all", "tool"] = "all"
) -> list[HumanGateReason]:
    """Human gates by reason: taint, untrusted value, risk.

    Definition: an approval is asked by a call whose ``guard.approval.outcome`` is ``pending``
    and that is not a resumption (one per ``guard.approval.id``); its reason is
    ``guard.approval.reason`` (:data:`GATE_REASONS`). ``approved``, ``denied`` and ``expired`` are
    the decisions later resumptions of the same id recorded; undecided ones are in none of them.
    """
    b = backend_of(source)
    return [
        HumanGateReason(
            reason=str(r["reason"]),
            tool=r["tool"],
            asked=int(r["asked"]),
            approved=int(r["approved"] or 0),
            denied=int(r["denied"] or 0),
            expired=int(r["expired"] or 0),
        )
        for r in b.fetch(*human_gates_by_reason_query(filters, b.dialect, by=by))
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingApprovals:
    """Approvals asked for and not decided, split at the confirmation TTL."""

    open: int
    """Asked within ``ttl`` of ``now``: a human can still decide."""
    lapsed: int
    """Asked longer ago than ``ttl``: expired, though no resumption recorded the expiry."""
    now: datetime | None
    """The reference time: the given one, or the latest call in the source."""


def pending_approvals_query(
    filters: Filters, d: Dialect = DUCKDB, *, cutoff: datetime
) -> SqlParams:
    """Approvals asked (as the confirmation funnel's ``required``) with no resumed call, counted
    as lapsed when asked before ``cutoff``.

    Not time-filtered on the resumption: a decision may come later than the filter's end.
    """
    where, params = where_clause(
        filters,
        d,
        extra=[
            "approval_outcome = 'pending'",
            "approval_id IS NOT NULL",
            "NOT coalesce(resumed, false)",
        ],
    )
    params["cutoff"] = d.value(cutoff)
    return (
        f"""
        SELECT count(*) AS undecided,
               sum(CASE WHEN asked < {d.param("cutoff", "timestamp")} THEN 1 ELSE 0 END) AS lapsed
        FROM (
            SELECT approval_id, min(start_time) AS asked
            FROM {d.calls} {where}
            GROUP BY approval_id
        ) AS asked
        WHERE approval_id NOT IN (
            SELECT approval_id FROM {d.calls} WHERE resumed AND approval_id IS NOT NULL
        )
        """,
        params,
    )


def pending_approvals(
    source: Source,
    filters: Filters = ALL,
    *,
    ttl: timedelta = DEFAULT_CONFIRMATION_TTL,
    now: datetime | None = None,
) -> PendingApprovals:
    """Approvals still waiting for a human, and those that lapsed unanswered.

    Definition: an approval is asked by a call with ``guard.approval.outcome = pending`` (not a
    resumption) and decided by a later resumed call with the same ``guard.approval.id``. An
    undecided one is *open* while ``asked >= now - ttl`` and *lapsed* (expired) after: the guard
    refuses to resume it (``CONFIRMATION_EXPIRED``). ``now`` defaults to the latest call stored (the
    data's clock, right for a live database and for one loaded from old span files alike); ``ttl``
    is the deployment's ``Policy.confirmation_ttl``. ``open`` is the confirmation funnel's
    ``pending`` summed over tools, and ``lapsed`` is part of its ``expired``.
    """
    b = backend_of(source)
    if now is None:
        now = data_now(source)
    if now is None:
        return PendingApprovals(open=0, lapsed=0, now=None)
    [row] = b.fetch(*pending_approvals_query(filters, b.dialect, cutoff=now - ttl))
    undecided, lapsed = int(row["undecided"] or 0), int(row["lapsed"] or 0)
    return PendingApprovals(open=undecided - lapsed, lapsed=lapsed, now=now)
