"""The Altair charts the pages draw, built from plain rows (lists of dicts).

Rows go to Vega-Lite inline (``alt.Data(values=...)``): datetimes become ISO strings here, so the
pages pass analytics' values as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import altair as alt

from . import fmt

__all__ = [
    "bars",
    "color_cap",
    "heatmap",
    "lines",
    "run_lines",
    "small_multiples",
    "stacked_bars",
    "waterfall",
]

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
            y=alt.Y(f"{y}:Q", title=y, axis=alt.Axis(format=",d", tickMinStep=1)),
            color=alt.Color(
                f"{color}:N", title=None, scale=scale, legend=alt.Legend(labelLimit=400)
            ),
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
    fmt: str = ",.3~r",
) -> Any:
    """Lines over time, one per ``color`` value (legend in ``order``); ``log`` for a log y axis.

    ``fmt`` is a d3 format for the axis and tooltip; the default never uses e-notation.
    """
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
                legend=alt.Legend(orient="bottom", columns=3, labelLimit=320),
            ),
            tooltip=[
                alt.Tooltip(f"{x}:T"),
                f"{color}:N",
                alt.Tooltip(f"{y}:Q", format=fmt),
            ],
        )
        .properties(height=320)
    )


def small_multiples(
    panels: Sequence[tuple[str, Sequence[Row]]],
    *,
    x: str,
    y: str,
    columns: int = 3,
    fmt: str = ",.3~r",
) -> Any:
    """One small line chart per ``(title, rows)`` panel, each with its own y scale, in a grid.

    For series of very different sizes (stage latencies from 1 µs to 60 ms) that would overlap
    into one unreadable bundle on a shared axis. Each panel's title carries its unit. One faceted
    chart (not a concatenation of nine): Altair validates and Vega draws one spec.
    """
    rows = [{**row, "panel": title} for title, panel in panels for row in panel]
    return (
        alt.Chart(_data(rows))
        .mark_line(point=True)
        .encode(
            x=alt.X(f"{x}:T", title=None, axis=alt.Axis(labelOverlap=True, tickCount=4)),
            y=alt.Y(f"{y}:Q", title=None, axis=alt.Axis(format=fmt, tickCount=4)),
            tooltip=["panel:N", alt.Tooltip(f"{x}:T"), alt.Tooltip(f"{y}:Q", format=fmt)],
        )
        .properties(height=130, width=260)
        .facet(
            facet=alt.Facet(
                "panel:N",
                title=None,
                sort=[title for title, _ in panels],
                header=alt.Header(labelFontSize=12, labelAnchor="start", labelLimit=400),
            ),
            columns=columns,
        )
        .resolve_scale(y="independent")
        .resolve_axis(x="independent")
    )


def bars(
    rows: Sequence[Row],
    *,
    x: str,
    y: str,
    title: str = "",
    color: str | None = None,
    sort: Sequence[str] | None = None,
    fmt: str = ",d",
    colors: Mapping[str, str] | None = None,
    domain: tuple[float, float] | None = None,
) -> Any:
    """Horizontal bars: ``x`` is the quantity, ``y`` the category, labelled with the value.

    ``colors`` maps values of ``color`` to colours, so a page keeps one colour per outcome;
    ``domain`` fixes the axis (a rate's ``(0, 1)``: a bar at 48% must not fill the chart).
    """
    y_enc = alt.Y(
        f"{y}:N",
        title=None,
        sort=list(sort) if sort is not None else "-x",
        axis=alt.Axis(labelLimit=400),
    )
    base = alt.Chart(_data(rows), title=title).encode(
        # An explicit type: Vega turns "," into "1e+2" on axes.
        x=alt.X(
            f"{x}:Q",
            title=x,
            axis=alt.Axis(format=fmt, tickMinStep=1 if fmt.endswith("d") else alt.Undefined),
            scale=alt.Scale(domain=list(domain)) if domain is not None else alt.Undefined,
        ),
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


def color_cap(rates: Sequence[float | None], *, quantile: float = 0.9) -> float:
    """Where the heatmap's colour scale saturates: the ``quantile`` of the rates, at least 1%.

    One cell at 100% (a tool that only ever fails) would otherwise leave every other cell pale.
    """
    values = sorted(r for r in rates if r is not None and r > 0)
    if not values:
        return 1.0
    return max(0.01, values[min(len(values) - 1, int(quantile * (len(values) - 1) + 0.5))])


def heatmap(
    rows: Sequence[Row],
    *,
    selection: Any = None,
    codes: Sequence[str] = (),
    cap: float = 1.0,
) -> Any:
    """Tool (rows) by code (columns, in ``codes`` order): colour is the rate, the label the count.

    Rows whose ``gate`` is true (human gates: approvals asked on purpose) are drawn in one calm
    colour outside the rate scale, so they neither swamp it nor read as failures. The rate scale
    saturates at ``cap`` (:func:`color_cap`); the tooltip gives the exact rate.
    """
    base = alt.Chart(_data(rows)).encode(
        x=alt.X(
            "code:N",
            title="code (in the order the pipeline checks them)",
            sort=list(codes) or alt.Undefined,
            axis=alt.Axis(labelAngle=-40, labelLimit=260, labelOverlap=False, orient="top"),
        ),
        y=alt.Y("tool:N", title=None, axis=alt.Axis(labelLimit=260)),
        tooltip=[
            "tool:N",
            "code:N",
            alt.Tooltip("kind:N", title="kind"),
            alt.Tooltip("rejected:Q", title="calls with code", format=","),
            alt.Tooltip("calls:Q", title="calls of tool", format=","),
            alt.Tooltip("rate:Q", format=".1%"),
        ],
    )
    errors = (
        base.transform_filter("!datum.gate")
        .mark_rect()
        .encode(
            color=alt.Color(
                "rate:Q",
                title=f"rate (≥ {cap:.0%} darkest)" if cap < 1 else "rate",
                scale=alt.Scale(scheme="orangered", domain=[0, cap], clamp=True),
                legend=alt.Legend(format=".0%", orient="bottom", gradientLength=240),
            ),
        )
    )
    if selection is not None:
        errors = errors.add_params(selection)
    gated = base.transform_filter("datum.gate").mark_rect(color="#c9daf0")
    # Below the minimum-calls floor a rate is not shown; the cell stays, grey, with its count.
    unrated = base.transform_filter("!datum.gate && datum.rate == null").mark_rect(color="#e6e6e6")
    labels = base.mark_text(fontSize=12).encode(
        text=alt.Text("rejected:Q", format=","),
        color=alt.condition(
            f"!datum.gate && datum.rate > {0.55 * cap}", alt.value("white"), alt.value("black")
        ),
    )
    return (errors + gated + unrated + labels).properties(height=alt.Step(40))


def waterfall(rows: Sequence[Row]) -> Any:
    """A trace's spans as bars on a shared time axis since the call started.

    Rows carry ``start_ms``/``end_ms``; the axis reads in the unit that fits the trace
    (:func:`dashboards.fmt.time_unit`): a 75 µs call is drawn in µs, not in 0.005 ms steps.
    """
    order = [str(r["span"]) for r in rows]
    unit, factor = fmt.time_unit([float(r["end_ms"]) for r in rows])
    scaled = [
        {**r, "start": float(r["start_ms"]) * factor, "end": float(r["end_ms"]) * factor}
        for r in rows
    ]
    # Room on the right for the labels that follow the longest bar.
    right = 1.3 * max((float(r["end"]) for r in scaled), default=1.0)
    base = alt.Chart(_data(scaled)).encode(
        y=alt.Y(
            "span:N", sort=order, title=None, axis=alt.Axis(labelLimit=400, labelOverlap=False)
        ),
        tooltip=[
            "span:N",
            "outcome:N",
            "code:N",
            alt.Tooltip("start:Q", title=f"start ({unit})", format=",.3~r"),
            alt.Tooltip("label:N", title="took"),
        ],
    )
    bar = base.mark_bar().encode(
        x=alt.X(
            "start:Q",
            title=f"{unit} since the call started",
            scale=alt.Scale(domain=[0, right], nice=False),
            axis=alt.Axis(format=",~r"),
        ),
        x2="end:Q",
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
    label = base.mark_text(align="left", dx=4).encode(x="end:Q", text="label:N")
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
