"""Missing, empty, foreign and growing databases: a clear message, never a traceback."""

from __future__ import annotations

import time
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from analytics import metrics
from analytics.load import connect, load
from analytics.synth import generate, write_span_file

from .conftest import build_db, make_app
from .helpers import parse_count, unescape


def messages(at: AppTest) -> str:
    """Everything the page said in warnings and infos, as the reader sees it."""
    return " ".join(unescape(e.value) for e in [*at.warning, *at.info, *at.error])


class TestUnavailable:
    def test_no_source(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without --db or --clickhouse the page says how to start it."""
        at = make_app(monkeypatch, None)
        at.run()
        assert not at.exception
        assert "No data source" in messages(at)

    def test_missing_file(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A path with no file yet names the file and the command that creates it."""
        at = make_app(monkeypatch, tmp_path / "nope.duckdb")
        at.run()
        assert not at.exception
        text = messages(at)
        assert "No database at" in text and "callgate load" in text
        assert not (tmp_path / "nope.duckdb").exists(), "opened read-only: nothing created"

    def test_empty_database(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A callgate database without calls says it is empty, on every page."""
        db = tmp_path / "empty.duckdb"
        connect(db).close()
        at = make_app(monkeypatch, db)
        at.run()
        assert not at.exception
        assert "No calls yet" in messages(at)
        at.sidebar.radio(key="page").set_value("trace").run()
        assert "No calls yet" in messages(at)

    def test_foreign_duckdb_file(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """A DuckDB file that is not callgate's is named as such."""
        db = tmp_path / "other.duckdb"
        other = duckdb.connect(str(db))
        other.execute("CREATE TABLE t (x INTEGER)")
        other.close()
        at = make_app(monkeypatch, db)
        at.run()
        assert not at.exception
        assert "Not a callgate database" in messages(at)

    @pytest.mark.parametrize(
        "content",
        [b'{"resourceSpans": []}\n', b"\x00" * 64, b"SQLite format 3\x00" + b"\x00" * 200],
    )
    def test_not_a_duckdb_file(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes
    ) -> None:
        """A span file or another database is named "not a DuckDB file", at once, never "busy"."""
        db = tmp_path / "spans.jsonl"
        db.write_bytes(content)
        at = make_app(monkeypatch, db)
        started = time.monotonic()
        at.run()
        assert not at.exception
        text = messages(at)
        assert f"{db} is not a DuckDB file" in text and "busy" not in text
        assert time.monotonic() - started < 5, "no lock retries on a file that is not DuckDB"


class TestGrowingDatabase:
    def test_next_render_sees_new_spans(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Between renders the file is free for the loader, and the next render shows its spans."""
        db = build_db(tmp_path, spans=3_000, seed=5, tag="a")
        at = make_app(monkeypatch, db)
        at.run()
        before = parse_count(next(m.value for m in at.metric if m.label == "Calls"))
        more = write_span_file(tmp_path / "more.jsonl", generate(spans=3_000, seed=6, tag="b"))
        writer = connect(db)  # read-write: fails if the dashboard still held the file
        try:
            load(writer, [more])
        finally:
            writer.close()
        at.run()
        after = parse_count(next(m.value for m in at.metric if m.label == "Calls"))
        reader = connect(db, read_only=True)
        try:
            assert after == metrics.overview(reader)[0].calls > before
        finally:
            reader.close()
