"""Recovery: after a rejection the model could fix, did the next calls get it right?"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from functools import partial

import streamlit as st

from analytics.metrics import FIXABLE_DEFAULT_K

from .. import charts, data, fmt
from .base import Page, PageContext, open_selected, trace_link

__all__ = ["PAGE"]


def render(ctx: PageContext) -> None:
    """Recovery rate per tool, and over time."""
    st.header("Recovery")
    k = int(
        st.columns(4)[0].number_input(
            "Calls to look ahead (K)",
            min_value=1,
            max_value=20,
            value=FIXABLE_DEFAULT_K,
            key="recovery_k",
            help="A fixable rejection counts as recovered when an OK call to the same tool "
            "follows in the same session within the next K calls.",
        )
    )
    found = data.recovery(ctx.source, ctx.filters, k=k, min_calls=1, bucket=ctx.bucket)
    if not found.tools:
        st.success("No fixable rejections in this window.")
        return
    rejected = sum(r.rejected for r in found.tools)
    recovered = sum(r.recovered for r in found.tools)
    st.metric(
        "Recovery rate",
        fmt.rate(recovered / rejected if rejected else None),
        border=True,
        help=f"{recovered:,} of {rejected:,} fixable rejections recovered within {k} calls",
    )
    st.caption(f"{fmt.count(recovered)} of {fmt.count(rejected)} fixable rejections recovered.")
    st.subheader("Per tool")
    st.dataframe(
        [
            {
                "tool": r.tool,
                "fixable rejections": r.rejected,
                "recovered": r.recovered,
                "never recovered": r.rejected - r.recovered,
                "rate": fmt.rate(r.rate),
            }
            for r in found.tools
        ],
        hide_index=True,
    )
    st.altair_chart(
        charts.bars(
            [{"tool": r.tool, "recovery rate": r.rate or 0.0} for r in found.tools],
            x="recovery rate",
            y="tool",
            fmt=".1%",
            domain=(0.0, 1.0),
        ),
        width="stretch",
    )
    st.subheader("Per code")
    st.caption("A code whose rejections rarely recover has a message that does not say what to do.")
    st.dataframe(
        [
            {
                "code": r.code,
                "fixable rejections": r.rejected,
                "recovered": r.recovered,
                "never recovered": r.rejected - r.recovered,
                "rate": fmt.rate(r.rate),
            }
            for r in found.codes
        ],
        hide_index=True,
    )
    _never_recovered(found)
    totals: dict[datetime | None, list[int]] = defaultdict(lambda: [0, 0])
    for r in found.trend:
        totals[r.bucket][0] += r.recovered
        totals[r.bucket][1] += r.rejected
    st.altair_chart(
        charts.lines(
            [
                {"bucket": b, "recovery rate": rec / rej, "series": "all tools"}
                for b, (rec, rej) in totals.items()
                if rej
            ],
            x="bucket",
            y="recovery rate",
            color="series",
            title="Recovery rate over time",
            fmt=".0%",
        ),
        width="stretch",
    )


def _never_recovered(found: data.RecoveryData) -> None:
    st.subheader("Calls that never recovered")
    if not found.never_recovered:
        st.caption(f"Every fixable rejection was fixed within {found.k} calls.")
        return
    st.caption(
        f"The newest {len(found.never_recovered)} fixable rejections not fixed within {found.k} calls."
    )
    st.dataframe(
        [
            {
                "trace": trace_link(trace=c.trace_id),
                "start": fmt.when(c.start_time),
                "tool": c.tool,
                "code": c.code,
                "session": c.session,
                "arguments": c.arguments,
            }
            for c in found.never_recovered
        ],
        hide_index=True,
        column_config={"trace": st.column_config.LinkColumn("trace", display_text=r"trace=(.*)$")},
        key="recovery_never",
        on_select=partial(
            open_selected, "recovery_never", [c.trace_id for c in found.never_recovered]
        ),
        selection_mode="single-row",
    )
    st.caption("Pick a row to open its trace here; the link opens a new tab.")


PAGE = Page(slug="recovery", title="Recovery", render=render)
