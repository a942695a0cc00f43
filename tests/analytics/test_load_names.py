"""The loader reads exactly the files it is given, and the whole lines of a cut gzip (issue 9.10)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from analytics.cli import analytics_cli
from analytics.database import connect
from analytics.load import load
from analytics.synth import generate, write_span_file

from .conftest import dataset, span_count

NAMES = ["[x].jsonl", "a*.jsonl", "b?.jsonl", "{c,d}.jsonl", "e[!x].json", "back\\slash.jsonl"]


def _spans(con) -> int:
    return int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])


class TestNamesAreLiteral:
    @pytest.mark.parametrize("name", NAMES)
    def test_exactly_the_named_file(self, tmp_path: Path, name: str) -> None:
        """A name with glob characters loads that file, not the files its pattern matches."""
        write_span_file(tmp_path / "x.jsonl", generate(spans=300, seed=1, tag="a"))
        write_span_file(tmp_path / "ab.jsonl", generate(spans=300, seed=2, tag="b"))
        target = write_span_file(tmp_path / name, dataset())
        con = connect(":memory:")
        try:
            report = load(con, [target])
            assert [f.path for f in report.files] == [str(target)]
            assert report.spans == _spans(con) == span_count(dataset())
            assert load(con, [target]).spans == 0
        finally:
            con.close()

    def test_glob_characters_in_the_directory(self, tmp_path: Path) -> None:
        """A directory named like a pattern is read as that directory."""
        directory = tmp_path / "run[1]"
        directory.mkdir()
        (tmp_path / "run1").mkdir()
        write_span_file(tmp_path / "run1" / "traces.json", generate(spans=300, seed=3, tag="c"))
        write_span_file(directory / "traces.json", dataset())
        con = connect(":memory:")
        try:
            assert load(con, [directory]).spans == span_count(dataset())
        finally:
            con.close()

    def test_rotated_siblings_of_a_bracketed_name(self, tmp_path: Path) -> None:
        """The rotation siblings of ``t[1].json`` are ``t[1]-*.json``, not ``t1-*.json``."""
        write_span_file(tmp_path / "t[1]-2026-01-01.json", dataset())
        write_span_file(tmp_path / "t1-2026-01-01.json", generate(spans=300, seed=4, tag="d"))
        target = write_span_file(tmp_path / "t[1].json", generate(spans=200, seed=5, tag="e"))
        con = connect(":memory:")
        try:
            report = load(con, [target])
            assert sorted(Path(f.path).name for f in report.files) == [
                "t[1]-2026-01-01.json",
                "t[1].json",
            ]
        finally:
            con.close()


def _cut_gzip(tmp_path: Path) -> tuple[Path, bytes]:
    """A gzip span file cut in the middle; (its path, the uncut uncompressed bytes)."""
    plain = write_span_file(tmp_path / "plain.json", generate(spans=3_000, seed=6, tag="f"))
    data = plain.read_bytes()
    compressed = gzip.compress(data)
    path = tmp_path / "traces.json.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    return path, data


class TestTruncatedGzip:
    def test_whole_lines_load_and_the_cut_is_reported(self, tmp_path: Path) -> None:
        """The lines before the cut load; the report says the file was truncated."""
        path, data = _cut_gzip(tmp_path)
        con = connect(":memory:")
        try:
            report = load(con, [path])
            assert report.truncated == (str(path),)
            assert 0 < report.spans < data.count(b'"spanId"')
            assert report.errors == 0
        finally:
            con.close()

    def test_completed_later_resumes(self, tmp_path: Path) -> None:
        """When the whole file arrives, the next load adds exactly the rest."""
        path, data = _cut_gzip(tmp_path)
        con = connect(":memory:")
        try:
            first = load(con, [path]).spans
            path.write_bytes(gzip.compress(data))
            second = load(con, [path])
            assert second.truncated == ()
            assert first + second.spans == data.count(b'"spanId"')
        finally:
            con.close()

    def test_cli_warns(self, tmp_path: Path) -> None:
        """callgate load names the truncated file."""
        path, _ = _cut_gzip(tmp_path)
        result = CliRunner().invoke(
            analytics_cli, ["load", str(path), "--db", str(tmp_path / "db.duckdb")]
        )
        assert result.exit_code == 0
        assert "truncated gzip" in result.output and str(path) in result.output

    def test_concatenated_members(self, tmp_path: Path) -> None:
        """A gzip of several members (appended compressions) loads every member."""
        one = write_span_file(tmp_path / "one.json", generate(spans=300, seed=7, tag="a"))
        two = write_span_file(tmp_path / "two.json", generate(spans=300, seed=8, tag="b"))
        path = tmp_path / "both.json.gz"
        path.write_bytes(gzip.compress(one.read_bytes()) + gzip.compress(two.read_bytes()))
        con = connect(":memory:")
        try:
            report = load(con, [path])
            assert report.truncated == ()
            expected = one.read_bytes().count(b'"spanId"') + two.read_bytes().count(b'"spanId"')
            assert report.spans == expected
        finally:
            con.close()
