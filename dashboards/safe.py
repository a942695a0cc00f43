"""Values from spans, the database or the URL, rendered as text and never as Markdown.

Streamlit renders Markdown (and its own directives: ``:red[...]``, ``:material/icon:``, ``$math$``)
in ``st.markdown``, ``st.caption``, headers, alerts, metric labels, ``st.table`` cells and tooltips.
A tool name, session id or call id is chosen by the model or by whoever can write spans, and the
``?trace=`` parameter by whoever sends a link: interpolated as they are, ``![x](http://...)`` fetches
a remote image and ``[a](javascript:...)`` is a link. :func:`text` escapes every ASCII punctuation
character with a backslash (CommonMark's escape, which also stops GFM autolinks, HTML, entities and
Streamlit's directives) and folds line breaks, so the value reads exactly as it is stored. Never put
an escaped value inside backticks: code spans do not honour escapes.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

__all__ = ["link", "text"]

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")


def text(value: object) -> str:
    """Markdown source that renders as ``str(value)``, literally, on one line."""
    return _PUNCTUATION.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(value)))


def link(**params: str) -> str:
    """A relative link to the dashboard with ``params`` URL-encoded (``?page=trace&trace=...``)."""
    return "?" + urlencode(params)
