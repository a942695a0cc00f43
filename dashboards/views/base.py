"""What every page gets, and what a page is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import streamlit as st

from analytics.metrics import FilterOptions, Filters

from ..safe import link
from ..settings import Settings
from ..source import Source

__all__ = ["Page", "PageContext", "open_button", "open_selected", "trace_link"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PageContext:
    """The open source and the resolved sidebar choices, for one render of a page."""

    source: Source
    filters: Filters
    """The sidebar's filters, as analytics takes them."""
    bucket: timedelta
    """Trend bucket size that fits the chosen window."""
    options: FilterOptions
    settings: Settings


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    """A page of the dashboard."""

    slug: str
    """Its name in the URL: ``?page=<slug>``."""
    title: str
    render: Callable[[PageContext], None]


def trace_link(**params: str) -> str:
    """A relative link that opens the Trace explorer on a trace, session or call id.

    The values are URL-encoded: an id with ``&``, ``#`` or spaces stays one parameter.
    """
    return link(page="trace", **params)


def _open(**params: str) -> None:
    """Switch this browser session to the Trace explorer on ``params``: in place, the same tab,
    the same Streamlit session (a new tab is a new session: seconds of first render each)."""
    ((kind, value),) = params.items()
    st.session_state["page"] = "trace"
    st.session_state["trace_query"] = value
    st.query_params.from_dict({"page": "trace", kind: value})


def open_button(label: str, *, key: str, **params: str) -> None:
    """A button that opens the Trace explorer on one trace or session in place."""
    st.button(label, key=key, on_click=_open, kwargs=params)


def open_selected(key: str, ids: list[str], *, kind: str = "trace") -> None:
    """The ``on_select`` callback of a table whose rows are ``ids``: opens the picked one in place."""
    selection = st.session_state.get(key)
    rows = list(getattr(getattr(selection, "selection", None), "rows", []) or [])
    if not rows and isinstance(selection, dict):
        rows = list(selection.get("selection", {}).get("rows", []))
    if rows and 0 <= rows[0] < len(ids):
        _open(**{kind: ids[rows[0]]})
