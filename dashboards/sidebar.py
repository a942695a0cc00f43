"""The sidebar: which page, which calls (time range, service, tool, principal), how often to refresh."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import streamlit as st

from analytics.metrics import FilterOptions

from . import fmt
from .filters import CUSTOM, WINDOWS, Selection
from .settings import Settings
from .views import Page

__all__ = ["REFRESH_CHOICES", "filters", "page_picker", "refresh_interval"]

REFRESH_CHOICES: tuple[int, ...] = (5, 10, 30, 60, 300)
"""Auto-refresh intervals offered, in seconds."""
_TRACE_PARAMS = ("trace", "session", "call_id", "q")


def page_picker(pages: Sequence[Page]) -> Page:
    """The page radio, kept in step with ``?page=`` so every page has a URL."""
    by_slug = {p.slug: p for p in pages}
    if "page" not in st.session_state:
        wanted = st.query_params.get("page")
        st.session_state["page"] = wanted if wanted in by_slug else pages[0].slug
    st.sidebar.title("callgate")
    slug = str(
        st.sidebar.radio("Page", list(by_slug), format_func=lambda s: by_slug[s].title, key="page")
    )
    if st.query_params.get("page") != slug:
        st.query_params["page"] = slug
    if slug != "trace":
        for param in _TRACE_PARAMS:
            if param in st.query_params:
                del st.query_params[param]
    return by_slug[slug]


def filters(options: FilterOptions) -> Selection:
    """Time range, service, tool and principal pickers; their choices."""
    bar = st.sidebar
    bar.header("Filters")
    window = str(bar.selectbox("Time range", [*WINDOWS, CUSTOM], key="window"))
    days: tuple[date, date] | None = None
    if window == CUSTOM:
        first = options.first.date() if options.first else date.today()
        last = options.last.date() if options.last else first
        picked = bar.date_input("Days (UTC, inclusive)", value=(first, last), key="days")
        if isinstance(picked, tuple) and len(picked) == 2:
            days = (picked[0], picked[1])
    elif WINDOWS[window] is not None:
        bar.caption(f"Ends at the latest call, {fmt.when(options.last)} UTC.")
    return Selection(
        window=window,
        days=days,
        services=tuple(bar.multiselect("Service", options.services, key="services")),
        tools=tuple(bar.multiselect("Tool", options.tools, key="tools")),
        principals=tuple(bar.multiselect("Principal", options.principals, key="principals")),
    )


def refresh_interval(settings: Settings) -> int | None:
    """Seconds between refreshes of the page's data, or None when auto-refresh is off."""
    bar = st.sidebar
    bar.header("Refresh")
    on = bar.toggle("Auto-refresh", value=settings.refresh_seconds > 0, key="auto_refresh")
    default = min(REFRESH_CHOICES, key=lambda s: abs(s - settings.refresh_seconds))
    every = bar.select_slider(
        "Every (seconds)", options=REFRESH_CHOICES, value=default, key="refresh_every",
        disabled=not on,
    )  # fmt: skip
    return int(every) if on else None
