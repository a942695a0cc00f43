"""Values from spans, the database or the URL, rendered as text and never as Markdown.

Streamlit renders Markdown (and its own directives: ``:red[...]``, ``:material/icon:``, ``$math$``)
in ``st.markdown``, ``st.caption``, headers, alerts, metric labels, ``st.table`` cells and tooltips,
and after parsing it turns bare URLs, ``www.`` names and e-mail addresses in text into links. A tool
name, session id or call id is chosen by the model or by whoever can write spans, and the
``?trace=`` parameter by whoever sends a link: interpolated as they are, ``![x](http://...)`` fetches
a remote image and ``[a](javascript:...)`` is a link.

Backslash escapes are not enough (the link finder runs on the text after escapes are resolved), so
:func:`text` puts the value in an inline code span: its content is literal in CommonMark (no
escapes, emphasis, links, HTML or entities) and the link finder and directives skip code. The fence
is one backtick longer than any run of backticks in the value, and line breaks are folded so the
value cannot start a block of its own. One thing reaches into code spans: before parsing, the
frontend rewrites every ``:material/`` in the source to ``:material_`` (for its icon syntax), so a
WORD JOINER (U+2060, invisible) is put after the colon to keep such a value as it is.
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

__all__ = ["WORD_JOINER", "link", "text"]

_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x85]+")
_BACKTICKS = re.compile(r"`+")
_ICON_PREFIX = ":material/"
WORD_JOINER = "\u2060"


def text(value: object) -> str:
    """Markdown source that renders as ``str(value)``, literally, on one line (as inline code).

    An empty value is an empty string (not an empty code box).
    """
    shown = _LINE_BREAKS.sub(" ", str(value)).replace(_ICON_PREFIX, f":{WORD_JOINER}material/")
    if not shown.strip():
        return ""
    fence = "`" * (1 + max((len(run) for run in _BACKTICKS.findall(shown)), default=0))
    # CommonMark strips one space on each side when both are there: the value reads unchanged.
    return f"{fence} {shown} {fence}"


def link(**params: str) -> str:
    """A relative link to the dashboard with ``params`` URL-encoded (``?page=trace&trace=...``)."""
    return "?" + urlencode(params)
