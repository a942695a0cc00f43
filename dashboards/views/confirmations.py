"""Confirmations: from "a human must approve" to executed, refused, denied, expired or pending."""

from __future__ import annotations

import streamlit as st

from .. import charts, data, fmt
from .base import Page, PageContext

__all__ = ["PAGE"]

_COLORS = {
    "Required": "#9aa5b1",
    "Executed": "#4c9f70",
    "Refused": "#dd8a3e",
    "Denied": "#d64545",
    "Expired": "#a05195",
    "Pending": "#2b6cb0",
}
"""One colour per funnel step, the same in every chart of the page."""


def render(ctx: PageContext) -> None:
    """The funnel in total and per tool, and its outcomes over time."""
    st.header("Confirmations")
    found = data.confirmations(
        ctx.source, ctx.filters, bucket=ctx.bucket, confirmation_ttl=ctx.settings.confirmation_ttl
    )
    required = found.total.counts["required"]
    if not required:
        st.info("No call asked for a confirmation in this window.")
        return
    columns = st.columns(len(data.FUNNEL_STEPS))
    for column, (name, label, meaning) in zip(columns, data.FUNNEL_STEPS, strict=True):
        value = found.total.counts[name]
        if name == "expired" and found.pending.lapsed:
            meaning = f"{meaning} ({fmt.count(found.pending.lapsed)} lapsed with no resumption)"
        if name == "pending":
            meaning = (
                f"still open (asked within the {fmt.duration(ctx.settings.confirmation_ttl)} TTL)"
            )
        with column:
            st.metric(label, fmt.count(value), border=True, help=meaning)
            share = "" if name == "required" else f" · {fmt.rate(value / required)}"
            st.caption(f"{meaning}{share}")
    st.altair_chart(
        charts.bars(
            [
                {"step": label, "calls": found.total.counts[name]}
                for name, label, _ in data.FUNNEL_STEPS
            ],
            x="calls",
            y="step",
            color="step",
            colors=_COLORS,
            sort=[label for _, label, _ in data.FUNNEL_STEPS],
            title="Funnel",
        ),
        width="stretch",
    )
    st.subheader("Per tool")
    st.dataframe(
        [
            {"tool": r.tool, **{label: getattr(r, name) for name, label, _ in data.FUNNEL_STEPS}}
            for r in found.tools
        ],
        hide_index=True,
    )
    if found.reasons:
        st.subheader("Why a human was asked")
        st.dataframe(
            [
                {
                    "reason": r.reason,
                    "asked": r.asked,
                    "approved": r.approved,
                    "denied": r.denied,
                    "expired": r.expired,
                }
                for r in found.reasons
            ],
            hide_index=True,
        )
        st.caption(
            "taint: untrusted text was read in the session (session-wide mode, or a tool that "
            "declares no sinks); untrusted value: a sink argument no trusted source vouches for; "
            "risk: a risky call, by the tool or by its arguments. What each reason costs in "
            "approvals."
        )
    outcomes = [(name, label) for name, label, _ in data.FUNNEL_STEPS if name != "required"]
    st.altair_chart(
        charts.stacked_bars(
            [
                {"bucket": p.bucket, "calls": p.counts[name], "outcome": label}
                for p in found.trend
                for name, label in outcomes
                if p.counts[name]
            ],
            x="bucket",
            y="calls",
            color="outcome",
            order=[label for _, label in outcomes],
            colors=[_COLORS[label] for _, label in outcomes],
            title="Outcomes by when the confirmation was asked",
        ),
        width="stretch",
    )


PAGE = Page(slug="confirmations", title="Confirmations", render=render)
