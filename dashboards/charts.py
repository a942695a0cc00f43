"""The Altair charts the pages draw, built from plain rows (lists of dicts).

Rows go to Vega-Lite inline (``alt.Data(values=...)``): datetimes become ISO strings here, so the
pages pass analytics' values as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import altair as alt

__all__ = ["bars", "heatmap", "lines", "run_lines", "stacked_bars", "waterfall"]

Row = Mapping[str, Any]


def _data(rows: Sequence[Row]) -> Any:
    return alt.InlineData(
        values=[
            {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
            for row in rows
        ]
    )


def stacked_bars(
    rows: Sequence[Row],
    *,
    x: str,
    y: str,
    color: str,
    title: str = "",
    order: Sequence[str] = (),
    colors: Sequence[str] = (),
) -> Any:
    """Bars over time (``x`` a timestamp field), stacked by ``color`` (domain ``order``)."""
    scale = (
        alt.Scale(domain=list(order), range=list(colors) or alt.Undefined)
        if order
        else alt.Undefined
    )
    return (
        alt.Chart(_data(rows), title=title)
        .mark_bar()
        .encode(
            x=alt.X(f"{x}:T", title=None),
            y=alt.Y(f"{y}:Q", title=y),
            color=alt.Color(f"{color}:N", title=None, scale=scale),
            tooltip=[alt.Tooltip(f"{x}:T"), f"{color}:N", f"{y}:Q"],
        )
        .properties(height=240)
    )


def lines(
    rows: Sequence[Row],
    *,
    x: str,
    y: str,
    color: str,
    title: str = "",
    log: bool = False,
    order: Sequence[str] = (),
    fmt: str = "~g",
) -> Any:
    """Lines over time, one per ``color`` value (legend in ``order``); ``log`` for a log y axis."""
    scale = alt.Scale(type="log") if log else alt.Undefined
    return (
        alt.Chart(_data(rows), title=title)
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:T", title=None),
            y=alt.Y(f"{y}:Q", title=y, scale=scale, axis=alt.Axis(format=fmt)),
            color=alt.Color(
                f"{color}:N",
                title=None,
                sort=list(order) or alt.Undefined,
                legend=alt.Legend(orient="bottom", columns=5),
            ),
            tooltip=[
                alt.Tooltip(f"{x}:T"),
                f"{color}:N",
                alt.Tooltip(f"{y}:Q", format=fmt if "%" in fmt else ".3~f"),
            ],
        )
        .properties(height=320)
    )


def bars(
    rows: Sequence[Row],
    *,
    x: str,
    y: str,
    title: str = "",
    color: str | None = None,
    sort: Sequence[str] | None = None,
    fmt: str = ",",
    colors: Mapping[str, str] | None = None,
) -> Any:
    """Horizontal bars: ``x`` is the quantity, ``y`` the category, labelled with the value.

    ``colors`` maps values of ``color`` to colours, so a page keeps one colour per outcome.
    """
    y_enc = alt.Y(f"{y}:N", title=None, sort=list(sort) if sort is not None else "-x")
    base = alt.Chart(_data(rows), title=title).encode(
        x=alt.X(f"{x}:Q", title=x, axis=alt.Axis(format=fmt)),
        y=y_enc,
        tooltip=[f"{y}:N", alt.Tooltip(f"{x}:Q", format=fmt)],
    )
    bar = base.mark_bar()
    if color:
        scale = (
            alt.Scale(domain=list(colors), range=list(colors.values())) if colors else alt.Undefined
        )
        bar = bar.encode(color=alt.Color(f"{color}:N", title=None, legend=None, scale=scale))
    text = base.mark_text(align="left", dx=3).encode(text=alt.Text(f"{x}:Q", format=fmt))
    return (bar + text).properties(height=alt.Step(30))


def heatmap(rows: Sequence[Row], *, selection: Any = None) -> Any:
    """Tool (rows) by code (columns): colour is the rate, the label the count of calls."""
    base = alt.Chart(_data(rows)).encode(
        x=alt.X(
            "code:N", title=None, axis=alt.Axis(labelAngle=-45, labelLimit=260, labelOverlap=False)
        ),
        y=alt.Y("tool:N", title=None, axis=alt.Axis(labelLimit=220)),
    )
    cells = base.mark_rect().encode(
        color=alt.Color("rate:Q", title="rate", scale=alt.Scale(scheme="orangered")),
        tooltip=[
            "tool:N",
            "code:N",
            alt.Tooltip("rejected:Q", title="calls with code", format=","),
            alt.Tooltip("calls:Q", title="calls of tool", format=","),
            alt.Tooltip("rate:Q", format=".1%"),
        ],
    )
    if selection is not None:
        cells = cells.add_params(selection)
    labels = base.mark_text(fontSize=12).encode(
        text=alt.Text("rejected:Q", format=","),
        color=alt.condition("datum.rate > 0.12", alt.value("white"), alt.value("black")),
    )
    return (cells + labels).properties(height=alt.Step(40))


def waterfall(rows: Sequence[Row]) -> Any:
    """A trace's spans as bars on a shared time axis (ms since the call started)."""
    order = [str(r["span"]) for r in rows]
    # Room on the right for the labels that follow the longest bar.
    right = 1.3 * max((float(r["end_ms"]) for r in rows), default=1.0)
    base = alt.Chart(_data(rows)).encode(
        y=alt.Y(
            "span:N", sort=order, title=None, axis=alt.Axis(labelLimit=220, labelOverlap=False)
        ),
        tooltip=[
            "span:N",
            "outcome:N",
            "code:N",
            alt.Tooltip("start_ms:Q", format=".3f"),
            alt.Tooltip("duration_ms:Q", format=".3f"),
        ],
    )
    bar = base.mark_bar().encode(
        x=alt.X(
            "start_ms:Q",
            title="ms since the call started",
            scale=alt.Scale(domain=[0, right], nice=False),
        ),
        x2="end_ms:Q",
        color=alt.Color(
            "outcome:N",
            title=None,
            legend=alt.Legend(orient="bottom"),
            scale=alt.Scale(
                domain=["call", "pass", "final", "reject"],
                range=["#9aa5b1", "#4c9f70", "#2b6cb0", "#d64545"],
            ),
        ),
    )
    label = base.mark_text(align="left", dx=4).encode(x="end_ms:Q", text="label:N")
    return (bar + label).properties(height=alt.Step(30))


def run_lines(
    rows: Sequence[Row],
    *,
    x: str,
    y: str,
    color: str,
    runs: Sequence[str],
    order: Sequence[str] = (),
) -> Any:
    """Rates per evaluation run: ``x`` names the run, in the order ``runs`` gives (oldest first),
    so runs minutes apart read as apart as runs weeks apart; ``y`` is a rate in [0, 1]."""
    return (
        alt.Chart(_data(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:O", title=None, sort=list(runs), axis=alt.Axis(labelAngle=0)),
            y=alt.Y(
                f"{y}:Q", title=None, scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format=".0%")
            ),
            color=alt.Color(
                f"{color}:N",
                title=None,
                sort=list(order) or alt.Undefined,
                legend=alt.Legend(orient="bottom", columns=6),
            ),
            tooltip=[f"{x}:O", f"{color}:N", alt.Tooltip(f"{y}:Q", format=".1%")],
        )
        .properties(height=300)
    )
