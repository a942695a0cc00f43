"""The dashboard's pages, in the order the sidebar lists them."""

from . import confirmations, evaluation, latency, loops, overview, recovery, rejections, trace
from .base import Page, PageContext

__all__ = ["PAGES", "Page", "PageContext"]

PAGES: tuple[Page, ...] = (
    overview.PAGE,
    rejections.PAGE,
    recovery.PAGE,
    confirmations.PAGE,
    loops.PAGE,
    latency.PAGE,
    trace.PAGE,
    evaluation.PAGE,
)
