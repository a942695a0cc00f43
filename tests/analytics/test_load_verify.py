"""`callgate load --verify` loads nothing from files that do not pass `callgate verify`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analytics.cli import analytics_cli
from telemetry import SpanFileWriter
from telemetry.chain import chain_key

from .conftest import dataset, span_count

KEY = b"load-verify-key"


def chained(directory: Path, span_file: Path, *, key: bytes | None, prefix: str = "spans") -> Path:
    """The dataset's lines written again through the real trail writer, chained with ``key``."""
    writer = SpanFileWriter(directory, chain_key=key, prefix=prefix)
    for line in span_file.read_text().splitlines():
        writer.write_lines([json.dumps(json.loads(line), separators=(",", ":"))])
    writer.close()
    return writer.files[0]


def spans_in(database: Path) -> int:
    if not database.exists():
        return 0
    with duckdb.connect(str(database), read_only=True) as con:
        found = con.execute("SELECT count(*) FROM spans").fetchone()
    return int(found[0]) if found else 0


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())


def load(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(analytics_cli, ["load", *args], catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.usefixtures("keyed")
class TestLoadVerify:
    """With --verify a trail that verifies loads whole; any problem loads nothing."""

    def test_a_trail_that_verifies_loads(self, tmp_path: Path, span_file: Path) -> None:
        """Every span of a keyed, intact trail is loaded."""
        trail = tmp_path / "trail"
        chained(trail, span_file, key=chain_key(KEY))
        database = tmp_path / "db.duckdb"
        code, output = load(str(trail), "--db", str(database), "--verify")
        assert code == 0, output
        assert spans_in(database) == span_count(dataset())

    @pytest.mark.parametrize("name", ["extra.ndjson", "extra.json", "extra.jsonl.gz"])
    def test_any_forged_file_load_would_read_refuses_all(
        self, tmp_path: Path, span_file: Path, name: str
    ) -> None:
        """An unkeyed file beside the trail, under any name load reads: one line, nothing loaded."""
        trail = tmp_path / "trail"
        chained(trail, span_file, key=chain_key(KEY))
        forged = chained(tmp_path / "forger", span_file, key=None)
        (trail / name).write_bytes(forged.read_bytes())
        database = tmp_path / "db.duckdb"
        code, output = load(str(trail), "--db", str(database), "--verify")
        assert code == 1
        assert output.count("\n") == 1
        assert output.startswith(f"Error: not loaded: {trail / name}:1: unkeyed")
        assert spans_in(database) == 0
        plain_code, _ = load(str(trail), "--db", str(database))
        assert plain_code == 0 and spans_in(database) > 0  # without --verify it loads, as before

    def test_an_unchained_file_is_refused(self, tmp_path: Path, span_file: Path) -> None:
        """OTLP lines with no chain at all (another exporter's file) are not loaded."""
        database = tmp_path / "db.duckdb"
        code, output = load(str(span_file), "--db", str(database), "--verify")
        assert code == 1
        assert "no chain" in output
        assert spans_in(database) == 0

    def test_allow_unkeyed_accepts_an_unkeyed_trail(self, tmp_path: Path, span_file: Path) -> None:
        """--allow-unkeyed loads an unkeyed chain that is whole."""
        trail = tmp_path / "trail"
        chained(trail, span_file, key=None)
        database = tmp_path / "db.duckdb"
        code, output = load(str(trail), "--db", str(database), "--verify", "--allow-unkeyed")
        assert code == 0, output
        assert spans_in(database) == span_count(dataset())

    def test_not_with_follow(self, tmp_path: Path, span_file: Path) -> None:
        """--verify checks once; with --follow it is a usage error, and nothing is loaded."""
        database = tmp_path / "db.duckdb"
        code, output = load(str(span_file), "--db", str(database), "--verify", "--follow")
        assert code == 2
        assert "not with --follow" in output
        assert spans_in(database) == 0

    def test_allow_unkeyed_needs_verify(self, tmp_path: Path, span_file: Path) -> None:
        """--allow-unkeyed alone would suggest a check that does not run: a usage error."""
        database = tmp_path / "db.duckdb"
        code, output = load(str(span_file), "--db", str(database), "--allow-unkeyed")
        assert code == 2 and "only goes with --verify" in output
        assert spans_in(database) == 0
