"""`callgate demo` as a person runs it, without the dashboard."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from callgate.cli import main


class TestDemoCommand:
    def test_report_and_an_incident_to_open(self, tmp_path: Path) -> None:
        """The demo prints what it wrote where, the report, and a trace id that `callgate trace` opens."""
        out = tmp_path / "run"
        result = CliRunner().invoke(
            main, ["demo", "--no-dashboard", "--sessions", "120", "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
        assert "120 sessions" in result.output and "0 bad lines" in result.output
        assert "confirmation funnel" in result.output
        match = re.search(r"callgate trace ([0-9a-f]{32})", result.output)
        assert match is not None, result.output
        traced = CliRunner().invoke(
            main, ["trace", match.group(1), "--db", str(out / "callgate.duckdb")]
        )
        assert traced.exit_code == 0, traced.output
        assert "guard.confirm" in traced.output or "guard.idempotency" in traced.output

    def test_one_otlp_target_at_a_time(self, tmp_path: Path) -> None:
        """--otlp (a local sidecar) and --otlp-endpoint (another collector) exclude each other."""
        result = CliRunner().invoke(
            main,
            ["demo", "--otlp", "--otlp-endpoint", "http://127.0.0.1:9", "--out", str(tmp_path)],
        )
        assert result.exit_code != 0 and "pick one" in result.output
