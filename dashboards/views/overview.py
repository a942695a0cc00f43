"""Overview: the numbers an SRE glances at, each with its trend over the window."""

from __future__ import annotations

import streamlit as st

from .. import charts, data, fmt
from .base import Page, PageContext

__all__ = ["PAGE"]


def render(ctx: PageContext) -> None:
    """Six headline metrics with sparklines, then calls over time."""
    st.header("Overview")
    head = data.headline(ctx.source, ctx.filters)
    if head is None:
        st.info("No calls match these filters.")
        return
    points = data.trend(ctx.source, ctx.filters, ctx.bucket)
    series = [p.headline for p in points]
    tiles: tuple[tuple[str, str, list[float], str], ...] = (
        ("Calls", fmt.count(head.calls), [float(h.calls) for h in series],
         f"{fmt.count(head.calls - head.rejected)} ok"),
        ("Rejection rate", fmt.rate(head.rejection_rate),
         [h.rejection_rate or 0.0 for h in series],
         f"{fmt.count(head.rejected)} of {fmt.count(head.calls)} calls"),
        ("Recovery rate", fmt.rate(head.recovery_rate), [h.recovery_rate or 0.0 for h in series],
         f"{fmt.count(head.recovered)} of {fmt.count(head.fixable_rejected)} fixable rejections"),
        ("Replays", fmt.count(head.replays), [float(h.replays) for h in series],
         "writes answered from the idempotency store"),
        ("Loop guards", fmt.count(head.loop_guards), [float(h.loop_guards) for h in series],
         "calls stopped going round in circles"),
        ("Pending approvals", fmt.count(head.pending), [float(h.pending) for h in series],
         "confirmations waiting for a human"),
    )  # fmt: skip
    for column, (label, value, trend, caption) in zip(st.columns(len(tiles)), tiles, strict=True):
        with column:
            st.metric(label, value, chart_data=trend, chart_type="area", border=True)
            st.caption(caption)
    rows = [
        row
        for p in points
        for row in (
            {"bucket": p.bucket, "calls": p.headline.calls - p.headline.rejected, "kind": "ok"},
            {"bucket": p.bucket, "calls": p.headline.rejected, "kind": "rejected"},
        )
    ]
    st.altair_chart(
        charts.stacked_bars(
            rows,
            x="bucket",
            y="calls",
            color="kind",
            title=f"Calls per {fmt.duration(ctx.bucket)}",
            order=("ok", "rejected"),
            colors=("#4c9f70", "#d64545"),
        ),
        width="stretch",
    )
    st.caption(
        f"{fmt.count(head.calls)} calls between {fmt.when(ctx.filters.start or ctx.options.first)}"
        f" and {fmt.when(ctx.options.last)} UTC; trends in buckets of {fmt.duration(ctx.bucket)}."
    )


PAGE = Page(slug="overview", title="Overview", render=render)
