"""Latency: call latency per tool (what an SRE pages on), then each pipeline stage.

Durations read in the unit that fits them (µs, ms or s; :func:`fmt.ms`), never ``0.000852 ms``.
Stages are small multiples, one panel each with its own scale and unit: nine lines from 1 µs to
60 ms on one axis were a bundle nobody could read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st

from .. import charts, data, fmt
from .base import Page, PageContext

__all__ = ["PAGE"]

_PERCENTILES = {"p50": "p50_ms", "p95": "p95_ms", "p99": "p99_ms"}


def render(ctx: PageContext) -> None:
    """Per-tool call latency (table and trend), then per-stage latency (table and panels)."""
    st.header("Latency")
    found = data.latency(ctx.source, ctx.filters, bucket=ctx.bucket)
    if not found.tools and not found.stages:
        st.info("No calls in this window.")
        return
    chosen = str(
        st.segmented_control(
            "Percentile", list(_PERCENTILES), default="p95", key="latency_percentile"
        )
        or "p95"
    )
    field = _PERCENTILES[chosen]
    _tools(ctx, found, chosen, field)
    _stages(ctx, found, chosen, field)


def _tools(ctx: PageContext, found: data.LatencyData, chosen: str, field: str) -> None:
    st.subheader("Call latency per tool")
    st.caption(
        "What the agent waits for per call: every stage, the handler and its retries "
        "(the execute_tool span)."
    )
    st.dataframe(
        [
            {
                "tool": t.tool,
                "calls": t.calls,
                "p50": fmt.ms(t.p50_ms),
                "p95": fmt.ms(t.p95_ms),
                "p99": fmt.ms(t.p99_ms),
            }
            for t in found.tools
        ],
        hide_index=True,
    )
    values = [float(getattr(t, field)) for t in found.tool_trend]
    unit, factor = fmt.time_unit(values)
    positive = [v for v in values if v > 0]
    log = bool(positive) and max(positive) / min(positive) > 50
    st.altair_chart(
        charts.lines(
            [
                {"bucket": t.bucket, unit: float(getattr(t, field)) * factor, "tool": t.tool}
                for t in found.tool_trend
                if getattr(t, field) > 0 or not log
            ],
            x="bucket",
            y=unit,
            color="tool",
            title=f"{chosen} call latency per tool per {fmt.duration(ctx.bucket)} ({unit}"
            + (", log scale)" if log else ")"),
            log=log,
            order=[t.tool for t in found.tools],
        ),
        width="stretch",
    )


def _stages(ctx: PageContext, found: data.LatencyData, chosen: str, field: str) -> None:
    st.subheader("Per stage")
    if not found.stages:
        st.caption("No stage spans in this window.")
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
    panels: list[tuple[str, Sequence[dict[str, Any]]]] = []
    for stage in (s.stage for s in found.stages):
        series = [s for s in found.trend if s.stage == stage]
        unit, factor = fmt.time_unit([float(getattr(s, field)) for s in series])
        panels.append(
            (
                f"{stage} ({unit})",
                [{"bucket": s.bucket, "value": float(getattr(s, field)) * factor} for s in series],
            )
        )
    st.caption(
        f"{chosen} of each stage per {fmt.duration(ctx.bucket)}; each panel has its own scale."
    )
    st.altair_chart(charts.small_multiples(panels, x="bucket", y="value"), width="content")


PAGE = Page(slug="latency", title="Latency", render=render)
