"""Latency: p50, p95 and p99 of each pipeline stage, over the window and over time."""

from __future__ import annotations

import streamlit as st

from .. import charts, data, fmt
from .base import Page, PageContext

__all__ = ["PAGE"]

_PERCENTILES = {"p50": "p50_ms", "p95": "p95_ms", "p99": "p99_ms"}


def render(ctx: PageContext) -> None:
    """A table per stage, then the chosen percentile per stage over time."""
    st.header("Latency")
    found = data.latency(ctx.source, ctx.filters, bucket=ctx.bucket)
    if not found.stages:
        st.info("No stage spans in this window.")
        return
    st.dataframe(
        [
            {
                "stage": s.stage,
                "spans": s.spans,
                "p50": fmt.ms(s.p50_ms),
                "p95": fmt.ms(s.p95_ms),
                "p99": fmt.ms(s.p99_ms),
            }
            for s in found.stages
        ],
        hide_index=True,
    )
    stages = [s.stage for s in found.stages]
    chosen = st.segmented_control(
        "Percentile", list(_PERCENTILES), default="p95", key="latency_percentile"
    )
    field = _PERCENTILES[str(chosen or "p95")]
    st.altair_chart(
        charts.lines(
            [
                {"bucket": s.bucket, "ms": getattr(s, field), "stage": s.stage}
                for s in found.trend
                if s.stage in stages
            ],
            x="bucket",
            y="ms",
            color="stage",
            title=f"{chosen} per stage (ms, log scale)",
            log=True,
            order=stages,
        ),
        width="stretch",
    )


PAGE = Page(slug="latency", title="Latency", render=render)
