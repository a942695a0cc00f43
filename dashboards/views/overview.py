"""Overview: the numbers an SRE glances at, each with its trend over the window.

Calls that did not run are shown by kind (:mod:`analytics.gates`): model errors (the model can fix
them), policy refusals, human gates (an approval asked on purpose, denied or expired) and upstream
failures. The combined rejection rate (all of them, docs/metrics.md) stays, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import streamlit as st

from analytics.alerts import DEFAULT_RULES, AlertResult, RulesError, load_rules
from analytics.gates import GATE_KINDS
from analytics.render import alert_value

from .. import charts, data, fmt, safe
from .base import Page, PageContext

__all__ = ["KIND_COLORS", "KIND_LABELS", "PAGE"]

KIND_LABELS: dict[str, str] = {
    "ok": "ok",
    "model_error": "model errors",
    "policy_refusal": "policy refusals",
    "human_gate": "human gates",
    "upstream_failure": "upstream failures",
}
"""How each kind of call reads on the pages."""

KIND_COLORS: dict[str, str] = {
    "ok": "#4c9f70",
    "model_error": "#d64545",
    "policy_refusal": "#dd8a3e",
    "human_gate": "#5b8fd1",
    "upstream_failure": "#7a5195",
}
"""One colour per kind, the same on every page."""

_TILE_HELP = {
    "model_error": "Rejected with a code the model can fix by resending (guard.fixable).",
    "policy_refusal": "Refused by budget, permission, loop, rule or policy; resending will not help.",
    "human_gate": "Asked a human (confirmation required, tainted context), denied or expired: "
    "the policy working as designed, not an error.",
    "upstream_failure": "Rejected at the execute stage: the API failed, timed out or refused.",
}


def render(ctx: PageContext) -> None:
    """Headline tiles with sparklines, calls over time by kind, and the split per tool."""
    st.header("Overview")
    try:
        rules = load_rules(Path(ctx.settings.alerts)) if ctx.settings.alerts else DEFAULT_RULES
    except RulesError as exc:
        st.error(safe.text(str(exc)))
        rules = DEFAULT_RULES
    found = data.overview(
        ctx.source,
        ctx.filters,
        ctx.bucket,
        confirmation_ttl=ctx.settings.confirmation_ttl,
        rules=rules,
        last=ctx.options.last,
    )
    if found is None:
        st.info("No calls match these filters.")
        return
    _firing(found)
    head, before = found.headline, found.previous
    series = [p.headline for p in found.trend]
    first: list[_Tile] = [
        _Tile("Calls", fmt.count(head.calls), [float(h.calls) for h in series],
              f"{fmt.count(head.calls - head.rejected)} ok",
              delta=_count_delta(head.calls, before.calls if before else None), color="off"),
    ]  # fmt: skip
    for kind in GATE_KINDS:
        count: int = getattr(head.gates, f"{kind}s")
        first.append(
            _Tile(
                KIND_LABELS[kind].capitalize(),
                fmt.rate(head.rate(kind)),
                [h.rate(kind) or 0.0 for h in series],
                f"{fmt.count(count)} of {fmt.count(head.calls)} calls",
                _TILE_HELP[kind],
                delta=_rate_delta(head.rate(kind), before.rate(kind) if before else None),
                color="off" if kind == "human_gate" else "inverse",
                metric=f"{kind}_rate",
            )
        )
    pending = found.pending
    second: list[_Tile] = [
        _Tile("Rejection rate", fmt.rate(head.rejection_rate),
              [h.rejection_rate or 0.0 for h in series],
              f"all {fmt.count(head.rejected)} calls not OK, gates included",
              "The combined figure of docs/metrics.md: the four kinds above added up.",
              delta=_rate_delta(head.rejection_rate, before.rejection_rate if before else None),
              metric="rejection_rate"),
        _Tile("Recovery rate", fmt.rate(head.recovery_rate),
              [h.recovery_rate or 0.0 for h in series],
              f"{fmt.count(head.recovered)} of {fmt.count(head.fixable_rejected)} model errors "
              "fixed",
              delta=_rate_delta(head.recovery_rate, before.recovery_rate if before else None),
              color="normal", metric="recovery_rate"),
        _Tile("Replays", fmt.count(head.replays), [float(h.replays) for h in series],
              "writes answered from the idempotency store",
              delta=_count_delta(head.replays, before.replays if before else None), color="off"),
        _Tile("Loop guards", fmt.count(head.loop_guards), [float(h.loop_guards) for h in series],
              "calls stopped going round in circles",
              delta=_count_delta(head.loop_guards, before.loop_guards if before else None),
              metric="loop_guards"),
        _Tile("Pending approvals", fmt.count(pending.open), None,
              f"waiting for a human; {fmt.count(pending.lapsed)} more expired unanswered",
              f"Undecided approvals asked in the last "
              f"{fmt.duration(ctx.settings.confirmation_ttl)} (the confirmation TTL) before the "
              "latest call; older ones have expired.",
              metric="pending_approvals"),
    ]  # fmt: skip
    over = _over_threshold(found.alerts)
    for row in (first, second):
        for column, tile in zip(st.columns(len(first)), row, strict=False):
            with column:
                tile.draw(over.get(tile.metric or ""))
    if before is not None:
        st.caption("Deltas compare with the window of the same length just before this one.")
    _calls_chart(ctx, found)
    _per_tool(found)
    start = fmt.when(ctx.filters.start or ctx.options.first)
    st.caption(
        f"{fmt.count(head.calls)} calls between {start} and {fmt.when(ctx.options.last)} UTC; "
        f"trends in buckets of {fmt.duration(ctx.bucket)}."
    )


@dataclass(frozen=True, slots=True)
class _Tile:
    """One headline tile: its value, sparkline, caption, delta and the alert metric it shows."""

    label: str
    value: str
    trend: list[float] | None
    caption: str
    tip: str | None = None
    delta: str | None = None
    color: Literal["normal", "inverse", "off"] = "inverse"
    """How streamlit colours the delta: "inverse" where up is bad."""
    metric: str | None = None
    """The :data:`analytics.alerts.METRICS` name whose untargeted rules mark this tile."""

    def draw(self, firing: AlertResult | None) -> None:
        chart: dict[str, Any] = (
            {"chart_data": self.trend, "chart_type": "area"} if self.trend is not None else {}
        )
        st.metric(
            self.label,
            self.value,
            delta=self.delta,
            delta_color=self.color,
            border=True,
            help=self.tip,
            **chart,
        )
        st.caption(self.caption)
        if firing is not None:
            st.caption(f"⚠ over its threshold: {safe.text(firing.rule.describe())}")


def _rate_delta(now: float | None, before: float | None) -> str | None:
    """The change in percentage points, e.g. ``+2.1 pp``."""
    if now is None or before is None:
        return None
    return f"{(now - before) * 100:+.1f} pp"


def _count_delta(now: int, before: int | None) -> str | None:
    return None if before is None else f"{now - before:+,}"


def _over_threshold(results: tuple[AlertResult, ...]) -> dict[str, AlertResult]:
    """Firing rules over every tool and code, by metric: the tiles they mark."""
    return {
        r.rule.metric: r
        for r in reversed(results)
        if r.firing and r.rule.tool is None and r.rule.code is None
    }


def _firing(found: data.OverviewData) -> None:
    """The firing alert rules, as ``callgate alerts`` prints them, above the tiles."""
    firing = [r for r in found.alerts if r.firing]
    if not firing:
        checked = len(found.alerts)
        st.caption(f"Alerts: none of {checked} rules fire (`callgate alerts` checks the same).")
        return
    lines = [
        f"**{safe.text(r.rule.name)}**: {safe.text(r.rule.describe())}, now "
        f"{safe.text(alert_value(r.value, r.rule.metric))}"
        f" (previous window {safe.text(alert_value(r.previous, r.rule.metric))})"
        for r in firing
    ]
    # A bordered block, not st.error: a firing rule is what the data says, not a page failure.
    with st.container(border=True):
        st.markdown(f"**⚠ {len(firing)} alert rule(s) firing**")
        st.markdown("\n".join(f"- {x}" for x in lines))


def _calls_chart(ctx: PageContext, found: data.OverviewData) -> None:
    kinds = ("ok", *GATE_KINDS)
    rows: list[dict[str, Any]] = []
    for p in found.trend:
        h = p.headline
        counts = {"ok": h.calls - h.rejected, **{k: getattr(h.gates, f"{k}s") for k in GATE_KINDS}}
        rows.extend(
            {"bucket": p.bucket, "calls": counts[k], "kind": KIND_LABELS[k]}
            for k in kinds
            if counts[k]
        )
    st.altair_chart(
        charts.stacked_bars(
            rows,
            x="bucket",
            y="calls",
            color="kind",
            title=f"Calls per {fmt.duration(ctx.bucket)}, by how they ended",
            order=[KIND_LABELS[k] for k in kinds],
            colors=[KIND_COLORS[k] for k in kinds],
        ),
        width="stretch",
    )


def _per_tool(found: data.OverviewData) -> None:
    st.subheader("Per tool")
    st.caption(
        "Each share is of the tool's calls. Human gates are approvals the policy asks for: "
        "a write tool with a high human-gate share is working as designed."
    )
    st.dataframe(
        [
            {
                "tool": t.tool,
                "calls": t.calls,
                **{KIND_LABELS[k]: fmt.rate(t.rate(k)) for k in GATE_KINDS},
                "all not OK": fmt.rate(t.rejected / t.calls if t.calls else None),
            }
            for t in sorted(found.tools, key=lambda t: -t.calls)
        ],
        hide_index=True,
    )


PAGE = Page(slug="overview", title="Overview", render=render)
