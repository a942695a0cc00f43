"""One render of the dashboard: sidebar, then the chosen page in an auto-refreshing fragment.

``app.py`` (the script Streamlit runs) calls :func:`run`. The page body is a fragment with
``run_every``: on a database that keeps filling it re-reads its numbers on a timer without
resetting the sidebar. Each render opens the source and closes it again (see
:mod:`dashboards.source` for why).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import streamlit as st

from analytics.metrics import FilterOptions

from . import data, safe, sidebar
from .filters import Selection, resolve
from .settings import Settings
from .source import Source, Unavailable, open_source, source_errors
from .views import PAGES, Page, PageContext

__all__ = ["run"]

_NO_OPTIONS = FilterOptions(services=(), tools=(), principals=(), first=None, last=None)


def run() -> None:
    """Render the app once (Streamlit calls the script on every interaction)."""
    st.set_page_config(page_title="callgate", page_icon="🛡️", layout="wide")
    settings = Settings.from_env(os.environ)
    page = sidebar.page_picker(PAGES)
    with open_source(settings) as source:
        options = _options(source, settings)
    selection = sidebar.filters(options if isinstance(options, FilterOptions) else _NO_OPTIONS)
    every = sidebar.refresh_interval(settings)
    st.sidebar.caption(f"Source: {safe.text(settings.describe())}")

    def body() -> None:
        _render(settings, page, selection)

    st.fragment(body, run_every=every)()


def _render(settings: Settings, page: Page, selection: Selection) -> None:
    with open_source(settings) as source:
        options = _options(source, settings)
        if isinstance(options, Unavailable):
            st.header(page.title)
            st.warning(f"**{options.title}**\n\n{options.detail}")
            return
        if options.last is None:
            st.header(page.title)
            st.info(
                f"**No calls yet in {safe.text(settings.describe())}.**\n\nLoad span files with "
                "`callgate load PATH... --db FILE`; this page refreshes on its own."
            )
            return
        assert not isinstance(source, Unavailable)
        filters, bucket = resolve(selection, options)
        context = PageContext(
            source=source, filters=filters, bucket=bucket, options=options, settings=settings
        )
        try:
            page.render(context)
        except source_errors() as exc:  # e.g. a file written by an older callgate schema
            st.error(
                f"**A query failed on {safe.text(settings.describe())}.**\n\n"
                f"{safe.text(_first_line(exc))}\n\n"
                "If the file was made by an older callgate, load the span files into a new one."
            )
            return
    st.caption(f"Read at {datetime.now(UTC):%H:%M:%S} UTC from {safe.text(settings.describe())}.")


def _options(source: Source | Unavailable, settings: Settings) -> FilterOptions | Unavailable:
    if isinstance(source, Unavailable):
        return source
    try:
        return data.filter_options(source)
    except source_errors() as exc:
        if settings.clickhouse:
            return Unavailable(
                title=f"Cannot query {safe.text(settings.describe())}",
                detail=f"{safe.text(_first_line(exc))}. "
                "Is the collector's `otel_traces` table there?",
            )
        return Unavailable(
            title="Not a callgate database",
            detail=f"{safe.text(_first_line(exc))}. "
            "Create it with `callgate load PATH... --db FILE`.",
        )


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
