"""Rejections: which tool fails with which code, the fields behind INVALID_ARGUMENTS, drill-down."""

from __future__ import annotations

from functools import partial
from typing import Any

import altair as alt
import streamlit as st

from .. import charts, data, fmt, safe
from .base import Page, PageContext, open_selected, trace_link
from .overview import KIND_LABELS

__all__ = ["PAGE"]

_CELL_KEY = "rejections_cell"


def render(ctx: PageContext) -> None:
    """Heatmap with counts and rates, per-tool rates, top failing fields, one cell in detail."""
    st.header("Rejections")
    min_calls = int(
        st.columns(4)[0].number_input(
            "Minimum calls for a rate",
            min_value=1,
            value=20,
            key="rejections_min_calls",
            help="Below this many calls of a tool, its rates show as — so one call "
            "does not read as 100%.",
        )
    )
    found = data.rejections(ctx.source, ctx.filters, min_calls=min_calls, bucket=ctx.bucket)
    if not found.cells:
        st.success("No rejections in this window.")
        _watched(found)
        return
    cells: list[dict[str, Any]] = [
        {
            "tool": r.tool,
            "code": r.code,
            "kind": KIND_LABELS[found.kind_of(r.code)],
            "gate": found.kind_of(r.code) == "human_gate",
            "rejected": r.rejected,
            "calls": r.calls,
            "rate": r.rate,
        }
        for r in found.cells
    ]
    codes = [k.code for k in found.kinds]
    cap = charts.color_cap([c["rate"] for c in cells if not c["gate"]])
    pick = alt.selection_point(name="cell", fields=["tool", "code"])
    st.subheader("Tool by code")
    st.caption(
        "Codes in the order the pipeline checks them. Colour: calls of the tool that ended with "
        f"the code (darkest from {fmt.rate(cap)}); blue columns are human gates, approvals the "
        "policy asks for on purpose. Click a cell to open it below."
    )
    st.altair_chart(
        charts.heatmap(cells, selection=pick, codes=codes, cap=cap),
        width="stretch",
        key="rejections_heatmap",
        on_select=_on_heatmap_select,
    )
    order = {code: i for i, code in enumerate(codes)}
    st.dataframe(
        [
            {**{k: v for k, v in c.items() if k != "gate"}, "rate": fmt.rate(c["rate"])}
            for c in sorted(cells, key=lambda c: (str(c["tool"]), order.get(c["code"], 99)))
        ],
        hide_index=True,
        column_config={"rejected": "calls with code", "calls": "calls of tool"},
    )
    left, right = st.columns(2)
    with left:
        st.subheader("Per tool")
        st.dataframe(
            [
                {
                    "tool": r.tool,
                    "rejected": r.rejected,
                    "calls": r.calls,
                    "rate": fmt.rate(r.rate),
                }
                for r in found.tools
            ],
            hide_index=True,
        )
    with right:
        st.subheader("Top failing fields (INVALID_ARGUMENTS)")
        _fields(found)
    _drill_down(ctx, found)
    _watched(found)


def _watched(found: data.RejectionsData) -> None:
    """Calls that went through anyway: with a warning, or in shadow mode (never as rejections)."""
    if found.shadow:
        st.subheader("Shadow mode: would have rejected")
        st.caption(
            "Calls a guard in shadow mode ran although it would have refused them: not counted "
            "above, which shows what the model got. Read it before turning enforcement on."
        )
        st.dataframe(
            [
                {
                    "tool": r.tool,
                    "code": r.code,
                    "stage": r.stage,
                    "fixable": "yes" if r.fixable else "no",
                    "would have rejected": r.would_have_rejected,
                    "shadow calls": r.shadow_calls,
                    "rate": fmt.rate(r.rate),
                }
                for r in found.shadow
            ],
            hide_index=True,
        )
    if found.shadow_waits:
        st.subheader("Shadow mode: would have waited for a human")
        st.caption(
            "Not refusals: with enforcement on, these calls would wait for an approval (risk, "
            "taint, an untrusted value). What enforcement would cost in approvals."
        )
        st.dataframe(
            [
                {
                    "tool": r.tool,
                    "code": r.code,
                    "would have waited": r.would_have_rejected,
                    "shadow calls": r.shadow_calls,
                    "rate": fmt.rate(r.rate),
                }
                for r in found.shadow_waits
            ],
            hide_index=True,
        )
    if found.warnings:
        st.subheader("Warnings that let calls through")
        st.dataframe(
            [
                {
                    "tool": w.tool,
                    "code": w.code,
                    "warnings": w.warnings,
                    "calls of tool": w.calls,
                    "share": fmt.rate(w.share),
                }
                for w in found.warnings
            ],
            hide_index=True,
        )


def _fields(found: data.RejectionsData) -> None:
    if not found.fields:
        st.caption("No INVALID_ARGUMENTS rejections.")
        return
    rows = [
        {
            "tool": f.tool,
            "field": f.field,
            "calls": f.calls,
            "of INVALID_ARGUMENTS": f.invalid_calls,
            "share": fmt.rate(f.share),
        }
        for f in found.fields
    ]
    st.dataframe(rows, hide_index=True)
    st.altair_chart(
        charts.bars(
            [{"field": f"{f.tool} {f.field}", "calls": f.calls} for f in found.fields],
            x="calls",
            y="field",
        ),
        width="stretch",
    )


def _on_heatmap_select() -> None:
    """Clicking a heatmap cell picks it for the drill-down below."""
    state: Any = st.session_state.get("rejections_heatmap")
    points = (state or {}).get("selection", {}).get("cell") or []
    if points:
        st.session_state[_CELL_KEY] = (str(points[0]["tool"]), str(points[0]["code"]))


def _drill_down(ctx: PageContext, found: data.RejectionsData) -> None:
    st.subheader("Drill-down")
    # (tool, code) pairs, not "tool · code" strings: a tool may be named "evil · tool". Model
    # errors first, human gates last: the drill-down opens on what someone can fix, not on a gate.
    by_pair = {(str(r.tool), str(r.code)): r for r in found.cells}
    rank = {"model_error": 0, "policy_refusal": 1, "upstream_failure": 2, "human_gate": 3}
    pairs = sorted(by_pair, key=lambda p: (rank.get(found.kind_of(p[1]), 1), -by_pair[p].rejected))
    if st.session_state.get(_CELL_KEY) not in by_pair:
        st.session_state[_CELL_KEY] = pairs[0]
    picked = st.selectbox(
        "Tool and code (or click a heatmap cell)",
        pairs,
        format_func=lambda p: f"{p[0]} · {p[1]}",
        key=_CELL_KEY,
    )
    tool, code = picked if picked is not None else pairs[0]
    cell = by_pair[tool, code]
    st.markdown(
        f"**{fmt.count(cell.rejected)}** of {fmt.count(cell.calls)} calls of "
        f"**{safe.text(tool)}** ended **{safe.text(code)}** ({fmt.rate(cell.rate)})."
    )
    trend = [
        {"bucket": c.bucket, "calls": c.calls, "code": code}
        for c in found.counts
        if c.tool == tool and c.code == code
    ]
    st.altair_chart(
        charts.stacked_bars(trend, x="bucket", y="calls", color="code", title=f"{tool} · {code}"),
        width="stretch",
    )
    found_examples = data.examples(ctx.source, ctx.filters, tool=tool, code=code)
    st.markdown("**Example traces**")
    if not found_examples:
        st.caption("No call with this tool and code in the window.")
        return
    st.dataframe(
        [
            {
                "trace": trace_link(trace=c.trace_id),
                "start": fmt.when(c.start_time),
                "session": c.session,
                "step": c.step,
                "principal": c.principal,
                "arguments": c.arguments,
            }
            for c in found_examples
        ],
        hide_index=True,
        column_config={"trace": st.column_config.LinkColumn("trace", display_text=r"trace=(.*)$")},
        key="rejection_examples",
        on_select=partial(
            open_selected, "rejection_examples", [c.trace_id for c in found_examples]
        ),
        selection_mode="single-row",
    )
    st.caption("Pick a row to open its trace here; the link opens a new tab.")


PAGE = Page(slug="rejections", title="Rejections", render=render)
