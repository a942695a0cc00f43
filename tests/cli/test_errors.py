"""Every command meets a missing file, a file of the wrong kind and a bad config with one line on
stderr and a non-zero exit: an error a person can act on, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES: dict[str, list[str]] = {
    "load: missing span file": ["load", "{tmp}/missing.jsonl", "--db", "{tmp}/x.duckdb"],
    "load: not a database": ["load", "{tmp}/spans.jsonl", "--db", "{tmp}/notdb.duckdb"],
    "report: missing database": ["report", "--db", "{tmp}/missing.duckdb"],
    "report: not a database": ["report", "--db", "{tmp}/notdb.duckdb"],
    "trace: not a database": ["trace", "abc", "--db", "{tmp}/notdb.duckdb"],
    "export: missing database": [
        "export",
        "--parquet",
        "{tmp}/out",
        "--db",
        "{tmp}/missing.duckdb",
    ],
    "alerts: not a database": ["alerts", "--db", "{tmp}/notdb.duckdb"],
    "alerts: bad rules": ["alerts", "--db", "{tmp}/notdb.duckdb", "--rules", "{tmp}/bad.yaml"],
    "dashboard: not a database": ["dashboard", "--db", "{tmp}/notdb.duckdb", "--port", "0"],
    "dashboard: bad alert rules": ["dashboard", "--alerts", "{tmp}/bad.yaml", "--port", "0"],
    "verify: missing directory": ["verify", "{tmp}/missing"],
    "verify: not a span file": ["verify", "{tmp}/notdb.duckdb"],
    "eval: missing case file": ["eval", "{tmp}/missing.jsonl"],
    "eval: not a database": ["eval", "{tmp}/cases.jsonl", "--db", "{tmp}/notdb.duckdb"],
    "replay: missing scenario": ["replay", "{tmp}/missing.jsonl"],
    "replay: no such app": ["replay", "{tmp}/cases.jsonl", "--app", "nosuch.module:factory"],
    "codes: no such app": ["codes", "--app", "nosuch.module:factory"],
    "gateway: missing config": ["gateway", "--config", "{tmp}/missing.yaml"],
    "gateway: bad config": ["gateway", "--config", "{tmp}/bad.yaml"],
    "gateway pin: bad config": ["gateway", "pin", "--config", "{tmp}/bad.yaml"],
    "gateway: upstream cannot start": ["gateway", "--config", "{tmp}/badup.yaml"],
    "approvals list: missing store": ["approvals", "list", "--store", "{tmp}/missing.sqlite"],
    "approvals list: not a store": ["approvals", "list", "--store", "{tmp}/notdb.duckdb"],
    "approvals show: not a store": ["approvals", "show", "apr_1", "--store", "{tmp}/bad.sqlite"],
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cli-errors")
    (tmp / "notdb.duckdb").write_text("not a database\n")
    (tmp / "bad.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)
    (tmp / "bad.yaml").write_text("{not: [valid\n")
    (tmp / "cases.jsonl").write_text('{"id": "c1", "messages": []}\n')
    (tmp / "spans.jsonl").write_text("{}\n")
    (tmp / "badup.yaml").write_text(
        "upstreams:\n  shop:\n    command: /nonexistent/server\n"
        "principals:\n  alice:\n    role: agent\n    tools: ['*']\n"
        "serve:\n  stdio:\n    principal: alice\n"
    )
    return tmp


@pytest.mark.parametrize("name", list(CASES))
def test_one_line_and_a_non_zero_exit(files: Path, name: str) -> None:
    """The command exits non-zero and says what is wrong in one line, without a traceback."""
    args = [a.format(tmp=files) for a in CASES[name]]
    done = subprocess.run(
        [sys.executable, "-m", "callgate", *args],
        cwd=files,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "CALLGATE_MASKING_KEY": "cli-errors-test"},
    )
    # Log records (WARNING ...) are the process's own diagnostics, not the command's error line.
    lines = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and not line.startswith(("WARNING ", "INFO "))
    ]
    assert done.returncode != 0, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "Exception Group" not in done.stderr, done.stderr
    assert len(lines) == 1, done.stderr


def test_gateway_demo_takes_a_relative_workdir(tmp_path: Path) -> None:
    """`gateway demo --workdir DIR` from any folder: DIR is made under it and the demo runs."""
    done = subprocess.run(
        [sys.executable, "-m", "callgate", "gateway", "demo", "--workdir", "rel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "rel" / "gateway.yaml").exists() and (tmp_path / "rel" / "spans").is_dir()


def test_every_command_shows_examples_and_exit_codes() -> None:
    """`callgate CMD --help` has an Examples section and says what each exit code means."""
    from click.testing import CliRunner

    from callgate.cli import COMMANDS, main

    for name in [*(entry.name for entry in COMMANDS), "demo"]:
        result = CliRunner().invoke(main, [name, "--help"], terminal_width=120)
        assert result.exit_code == 0, (name, result.output)
        assert "Examples:" in result.output and "Exit codes:" in result.output, name
