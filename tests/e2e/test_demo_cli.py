"""`callgate demo` as a person runs it, without the dashboard."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from callgate.cli import main
from callgate.demo import callgate_command


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


REPO = Path(__file__).resolve().parents[2]
CALLGATE = Path(sys.executable).parent / "callgate"


class TestDemoAsTyped:
    def test_negative_sessions_refused(self, tmp_path: Path) -> None:
        """--sessions -5 is a usage error, before any traffic runs."""
        result = CliRunner().invoke(
            main, ["demo", "--no-dashboard", "--sessions", "-5", "--out", str(tmp_path)]
        )
        assert result.exit_code == 2 and "-5 is not in the range x>=1" in result.output
        assert not (tmp_path / "spans").exists()

    def test_busy_port_is_named_with_the_way_out(self, tmp_path: Path) -> None:
        """With the dashboard's port taken, the demo says so and suggests --port 0, at once."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = CliRunner().invoke(
                main, ["demo", "--sessions", "5", "--port", str(port), "--out", str(tmp_path)]
            )
        assert result.exit_code == 1
        assert f"port {port} on 127.0.0.1 is already in use" in result.output
        assert "--port 0" in result.output
        assert "Traceback" not in result.output and not (tmp_path / "spans").exists()

    def test_printed_next_command_runs_as_shown(self, tmp_path: Path) -> None:
        """The `trace` command the demo prints runs, as one pasted line, in the same shell.

        PATH does not hold the venv (as for someone who ran `make demo`): the line names
        `.venv/bin/callgate`, not a bare `callgate` that the shell cannot find.
        """
        env = {**os.environ, "PATH": "/usr/bin:/bin", "COLUMNS": "80"}
        out = tmp_path / "run"
        demo = subprocess.run(
            [str(CALLGATE), "demo", "--no-dashboard", "--sessions", "80", "--out", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert demo.returncode == 0, demo.stderr
        lines = [line.strip() for line in demo.stdout.splitlines() if " trace " in line]
        # An incident, then a human's decision, read with the approvals store the demo kept.
        assert len(lines) == 2 and "--store" in lines[1], demo.stdout
        for command in lines:
            assert command.split()[0] != "callgate" and command.split()[1] == "trace"
            traced = subprocess.run(
                command, shell=True, cwd=REPO, env=env, capture_output=True, text=True, check=False
            )
            assert traced.returncode == 0, (command, traced.stderr)
            assert "execute_tool" in traced.stdout or "guard.confirm" in traced.stdout
        decided = [x for x in traced.stdout.splitlines() if ": denied by approver-" in x]
        assert decided and "(approvals store)" in decided[0], traced.stdout

    def test_command_is_bare_when_path_finds_this_callgate(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With the venv on PATH, the printed command is plain `callgate`."""
        monkeypatch.setenv("PATH", f"{CALLGATE.parent}:/usr/bin:/bin")
        assert callgate_command() == ["callgate"]
