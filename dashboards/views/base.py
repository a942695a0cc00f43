"""What every page gets, and what a page is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from analytics.metrics import FilterOptions, Filters

from ..safe import link
from ..settings import Settings
from ..source import Source

__all__ = ["Page", "PageContext", "trace_link"]


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
