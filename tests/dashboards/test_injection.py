"""Hostile names through every page: values from spans and the URL render as text, never Markdown.

The database's tool names, sessions, call ids and principals are Markdown images and links, HTML
and Streamlit directives (see ``conftest.HOSTILE_*``). Every piece of Markdown a page emits (text,
captions, headers, alerts, metric labels, ``st.table`` cells) is rendered with a CommonMark parser
here: it may hold no image, no link other than the dashboard's own ``?page=`` links, no HTML, and no
hostile string verbatim (only escaped). The browser test checks the same in Chromium's DOM.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from analytics import reconstruct
from analytics.load import connect
from dashboards import safe
from dashboards.views import PAGES

from .conftest import (
    HOSTILE_CALL_ID,
    HOSTILE_SESSION,
    HOSTILE_STRINGS,
    HOSTILE_TOOLS,
    make_app,
)

_MARKDOWN = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_ALLOWED_TAGS = {"p", "strong", "em", "code", "pre", "br", "a", "ul", "ol", "li"}


def markdown_sources(at: AppTest) -> Iterator[str]:
    """Every string the page hands Streamlit as Markdown."""
    for kind in ("markdown", "caption", "title", "header", "subheader"):
        for element in getattr(at, kind):
            yield str(element.value)
    for alert in (*at.warning, *at.info, *at.error, *at.success):
        yield str(alert.value)
    for metric in at.metric:
        yield str(metric.label)
        yield str(metric.value)
    for table in at.table:
        for column in table.value.columns:
            yield str(column)
            yield from (str(v) for v in table.value[column])
    for expander in at.expander:
        yield str(expander.label)
    for radio in at.radio:
        yield from (str(o) for o in radio.options)


_LIVE_IN_TEXT = re.compile(
    r"://|www\.|@|javascript:|<|\$|:(?:red|blue|green|orange|violet|gray|rainbow|material)[\[/]"
)
"""What Streamlit still acts on in a text node after CommonMark parsing: its link finder (URLs,
www. names, e-mail addresses), HTML, maths and directives. Code spans are never text nodes."""


def assert_inert(source: str) -> str:
    """``source`` renders to plain text, code and the dashboard's own links; return the text.

    Parsed with CommonMark: no image, no HTML, no link but ``?page=...``; and no text node (what
    Streamlit's link finder, maths and directives see after parsing) holding a URL, ``www.``, an
    address, ``<``, ``$`` or a directive: such values must sit in code spans.
    """
    for block in _MARKDOWN.parse(source):
        assert block.type not in ("html_block",), source
        for token in block.children or ():
            assert token.type not in ("image", "html_inline"), (source, token)
            if token.type == "link_open":
                assert str(token.attrs.get("href", "")).startswith("?"), (source, token.attrs)
            if token.type == "text":
                assert not _LIVE_IN_TEXT.search(token.content), (source, token.content)
    rendered = _MARKDOWN.render(source)
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", rendered))
    assert tags <= _ALLOWED_TAGS, (source, rendered)
    return html.unescape(re.sub(r"<[^>]+>", "", rendered)).replace(safe.WORD_JOINER, "")


def shown_text(at: AppTest) -> str:
    """Everything the page's Markdown renders to, as text, checked inert on the way."""
    return " ".join(assert_inert(s) for s in markdown_sources(at))


def open_page(at: AppTest, slug: str) -> AppTest:
    if "page" not in at.session_state:
        at.run()
    at.sidebar.radio(key="page").set_value(slug).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def hostile_app(hostile_db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The dashboard on the hostile database."""
    return make_app(monkeypatch, hostile_db)


@pytest.fixture
def hostile_con(hostile_db: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect(hostile_db, read_only=True)
    yield connection
    connection.close()


class TestEscaping:
    def test_text_renders_as_itself(self) -> None:
        """safe.text of a hostile string renders, through CommonMark, to exactly that string."""
        for hostile in (*HOSTILE_STRINGS, "a\\b", "&amp; &lt;", "1. x", "# h", "> q", "- li"):
            assert assert_inert(safe.text(hostile)).strip() == hostile.strip()

    def test_line_breaks_fold(self) -> None:
        """A value cannot start a new Markdown block: line breaks become spaces."""
        assert "\n" not in safe.text("a\n# heading\r\n> quote")

    def test_icon_syntax_survives_the_frontends_rewrite(self) -> None:
        """Streamlit rewrites ':material/' to ':material_' in the raw source, code spans too."""
        source = safe.text(HOSTILE_CALL_ID)
        assert ":material/" not in source
        assert assert_inert(source).strip() == HOSTILE_CALL_ID.strip()

    def test_backticks_cannot_close_the_span(self) -> None:
        """A value with backtick runs gets a longer fence and still reads as itself."""
        for value in ("`", "a `b` c", "``![x](http://evil.example/x.png)``", "` x `"):
            assert assert_inert(safe.text(value)).strip() == value

    def test_links_encode_their_values(self) -> None:
        """An id with & or # stays one URL parameter."""
        assert safe.link(page="trace", session="a&page=x#y") == (
            "?page=trace&session=a%26page%3Dx%23y"
        )


class TestHostileNamesOnEveryPage:
    def test_every_page_renders_them_as_text(self, hostile_app: AppTest) -> None:
        """Each page renders without an exception and emits no live Markdown or HTML."""
        hostile_app.run()
        for page in PAGES:
            open_page(hostile_app, page.slug)
            shown_text(hostile_app)

    def test_rejections_drill_down_on_a_tool_named_with_the_separator(
        self, hostile_app: AppTest
    ) -> None:
        """A tool named "evil · tool" can be picked in the drill-down (it used to crash)."""
        open_page(hostile_app, "rejections")
        box = hostile_app.selectbox(key="rejections_cell")
        pair = next(p for p in box.options if p.startswith("evil · tool · "))
        box.set_value(next(v for v in _pairs(hostile_app) if f"{v[0]} · {v[1]}" == pair)).run()
        assert not hostile_app.exception
        assert "evil · tool" in shown_text(hostile_app)

    def test_trace_facts_show_the_values_literally(
        self, hostile_app: AppTest, hostile_con: duckdb.DuckDBPyConnection
    ) -> None:
        """A call's tool, session and call id read as stored, with nothing interpreted."""
        session = next(
            s for (s,) in hostile_con.execute("SELECT DISTINCT session FROM calls").fetchall()
        )
        call = reconstruct.session_calls(hostile_con, session)[0]
        hostile_app.query_params["page"] = "trace"
        hostile_app.query_params["trace"] = call.trace_id
        hostile_app.run()
        assert not hostile_app.exception
        text = shown_text(hostile_app)
        assert str(call.tool) in text and session in text and str(call.call_id) in text
        assert HOSTILE_CALL_ID.strip() in text and HOSTILE_SESSION in text

    def test_session_search_lists_links_that_keep_the_id_whole(
        self, hostile_app: AppTest, hostile_con: duckdb.DuckDBPyConnection
    ) -> None:
        """Searching a hostile session finds it; its trace links are URL-encoded."""
        (session,) = hostile_con.execute("SELECT min(session) FROM calls").fetchone() or ("",)
        open_page(hostile_app, "trace")
        hostile_app.text_input(key="trace_query").set_value(session).run()
        assert not hostile_app.exception
        assert hostile_app.query_params["session"] == [session] or (
            hostile_app.query_params["session"] == session
        )
        shown_text(hostile_app)

    @pytest.mark.parametrize("param", ["trace", "session", "call_id"])
    def test_reflected_url_parameter(self, hostile_app: AppTest, param: str) -> None:
        """?trace=<markdown> (a link someone was sent) is shown as text in "Nothing found"."""
        payload = "![x](http://evil.example/r.png) [a](javascript:alert(1)) <b>b</b> :red[r]"
        hostile_app.query_params["page"] = "trace"
        hostile_app.query_params[param] = payload
        hostile_app.run()
        assert not hostile_app.exception
        assert payload in shown_text(hostile_app)


def _pairs(at: AppTest) -> list[tuple[str, str]]:
    """The drill-down's (tool, code) options, rebuilt from the tool names the test planted."""
    codes = {o.rsplit(" · ", 1)[1] for o in at.selectbox(key="rejections_cell").options}
    return [(tool, code) for tool in HOSTILE_TOOLS.values() for code in codes]
