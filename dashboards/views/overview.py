"""Overview: the numbers an SRE glances at, each with its trend over the window.

Calls that did not run are shown by kind (:mod:`analytics.gates`): model errors (the model can fix
them), policy refusals, human gates (an approval asked on purpose, denied or expired) and upstream
failures. The combined rejection rate (all of them, docs/metrics.md) stays, labelled as such.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from analytics.gates import GATE_KINDS

from .. import charts, data, fmt
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
    found = data.overview(
        ctx.source, ctx.filters, ctx.bucket, confirmation_ttl=ctx.settings.confirmation_ttl
    )
    if found is None:
        st.info("No calls match these filters.")
        return
    head = found.headline
    series = [p.headline for p in found.trend]
    first: list[tuple[str, str, list[float] | None, str, str | None]] = [
        ("Calls", fmt.count(head.calls), [float(h.calls) for h in series],
         f"{fmt.count(head.calls - head.rejected)} ok", None),
    ]  # fmt: skip
    for kind in GATE_KINDS:
        count: int = getattr(head.gates, f"{kind}s")
        first.append(
            (
                KIND_LABELS[kind].capitalize(),
                fmt.rate(head.rate(kind)),
                [h.rate(kind) or 0.0 for h in series],
                f"{fmt.count(count)} of {fmt.count(head.calls)} calls",
                _TILE_HELP[kind],
            )
        )
    pending = found.pending
    second: list[tuple[str, str, list[float] | None, str, str | None]] = [
        ("Rejection rate", fmt.rate(head.rejection_rate),
         [h.rejection_rate or 0.0 for h in series],
         f"all {fmt.count(head.rejected)} calls not OK, gates included",
         "The combined figure of docs/metrics.md: the four kinds above added up."),
        ("Recovery rate", fmt.rate(head.recovery_rate), [h.recovery_rate or 0.0 for h in series],
         f"{fmt.count(head.recovered)} of {fmt.count(head.fixable_rejected)} model errors fixed",
         None),
        ("Replays", fmt.count(head.replays), [float(h.replays) for h in series],
         "writes answered from the idempotency store", None),
        ("Loop guards", fmt.count(head.loop_guards), [float(h.loop_guards) for h in series],
         "calls stopped going round in circles", None),
        ("Pending approvals", fmt.count(pending.open), None,
         f"waiting for a human; {fmt.count(pending.lapsed)} more expired unanswered",
         f"Undecided approvals asked in the last {fmt.duration(ctx.settings.confirmation_ttl)} "
         "(the confirmation TTL) before the latest call; older ones have expired."),
    ]  # fmt: skip
    for row in (first, second):
        for column, (label, value, trend, caption, tip) in zip(
            st.columns(len(first)), row, strict=False
        ):
            with column:
                if trend is None:
                    st.metric(label, value, border=True, help=tip)
                else:
                    st.metric(
                        label, value, chart_data=trend, chart_type="area", border=True, help=tip
                    )
                st.caption(caption)
    _calls_chart(ctx, found)
    _per_tool(found)
    start = fmt.when(ctx.filters.start or ctx.options.first)
    st.caption(
        f"{fmt.count(head.calls)} calls between {start} and {fmt.when(ctx.options.last)} UTC; "
        f"trends in buckets of {fmt.duration(ctx.bucket)}."
    )


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
