"""Loops and replays: where agents went round in circles, and writes answered twice."""

from __future__ import annotations

from functools import partial

import streamlit as st

from .. import charts, data, fmt
from .base import Page, PageContext, open_selected, trace_link

__all__ = ["PAGE"]

_SESSIONS = 50


def render(ctx: PageContext) -> None:
    """Loop guards and replays per tool, over time, and the sessions they hit."""
    st.header("Loops and replays")
    found = data.loops(ctx.source, ctx.filters, bucket=ctx.bucket, limit=_SESSIONS)
    left, right = st.columns(2)
    with left:
        st.metric("Loop guards", fmt.count(sum(g.calls for g in found.guards)), border=True)
        st.subheader("Loop guards per tool and code")
        if found.guards:
            st.dataframe(
                [
                    {"tool": g.tool, "code": g.code, "calls": g.calls, "sessions": g.sessions}
                    for g in found.guards
                ],
                hide_index=True,
            )
        else:
            st.caption("No loop guard fired in this window.")
    with right:
        st.metric("Replays", fmt.count(sum(r.replayed for r in found.replays)), border=True)
        st.subheader("Replays per tool")
        if found.replays:
            st.dataframe(
                [
                    {
                        "tool": r.tool,
                        "replayed": r.replayed,
                        "calls": r.calls,
                        "sessions": r.sessions,
                    }
                    for r in found.replays
                ],
                hide_index=True,
            )
        else:
            st.caption("No write was replayed in this window.")
    if found.trend:
        st.altair_chart(
            charts.stacked_bars(
                [{"bucket": g.bucket, "calls": g.calls, "code": g.code} for g in found.trend],
                x="bucket",
                y="calls",
                color="code",
                title="Loop guards over time",
            ),
            width="stretch",
        )
    st.subheader(f"Sessions affected (worst {_SESSIONS})")
    if not found.sessions:
        st.caption("None.")
        return
    st.dataframe(
        [
            {
                "session": trace_link(session=s.session),
                "principal": s.principal,
                "service": s.service,
                "calls": s.calls,
                "loop guards": s.loop_guards,
                "replays": s.replays,
                "first": fmt.when(s.first),
                "last": fmt.when(s.last),
            }
            for s in found.sessions
        ],
        hide_index=True,
        column_config={
            "session": st.column_config.LinkColumn(
                "session", display_text=r"session=(.*)$", help="Open in the Trace explorer"
            )
        },
        key="loops_sessions",
        on_select=partial(
            open_selected,
            "loops_sessions",
            [s.session or "" for s in found.sessions],
            kind="session",
        ),
        selection_mode="single-row",
    )
    st.caption("Pick a row to open its session here; the link opens a new tab.")


PAGE = Page(slug="loops", title="Loops and replays", render=render)
