"""The ``callgate`` group: its command table, lazy loading, and one line for a missing extra."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from callgate.cli import COMMANDS, main
from tests.test_layers import EXTRAS

ROOT = Path(__file__).resolve().parents[2]

BLOCKING_RUN = """
import runpy, sys
names = sys.argv[1].split(",")
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocked())
sys.argv = ["callgate", *sys.argv[2:]]
runpy.run_module("callgate", run_name="__main__")
"""


def run_without(blocked: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """``callgate ARGS`` in a fresh interpreter where the ``blocked`` modules cannot be imported."""
    return subprocess.run(
        [sys.executable, "-c", BLOCKING_RUN, ",".join(blocked), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
    )


class TestCommandTable:
    """The table ``--help`` reads says what each command says of itself."""

    @pytest.mark.parametrize("entry", COMMANDS, ids=[entry.name for entry in COMMANDS])
    def test_entry_matches_its_command(self, entry: object) -> None:
        """The entry's name and help are its click command's, which lives at the entry's target."""
        from callgate.cli import Entry

        assert isinstance(entry, Entry)
        module, _, attribute = entry.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        assert isinstance(command, click.Command)
        assert command.name == entry.name
        assert command.get_short_help_str(10_000) == entry.help

    def test_help_lists_every_command(self) -> None:
        """`callgate --help` names every command of the table, and the demo."""
        result = CliRunner().invoke(main, ["--help"])
        assert result.exit_code == 0, result.output
        listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines()[1:]}
        assert listed == {entry.name for entry in COMMANDS} | {"demo"}

    def test_unknown_command_is_a_usage_error(self) -> None:
        """A name in no table is click's usage error (exit 2), not an import."""
        result = CliRunner().invoke(main, ["no-such-command"])
        assert result.exit_code == 2
        assert "No such command" in result.output


NEEDS = [
    ("dashboard", ("--help",), "dashboard"),
    ("load", ("--help",), "analytics"),
    ("report", ("--help",), "analytics"),
    ("trace", ("--help",), "analytics"),
    ("export", ("--help",), "analytics"),
    # --help needs no grpc (the sidecar's room loads it only to serve); serving does.
    ("sidecar", ("--dir", "spans", "--grpc-port", "0", "--http-port", "0"), "sidecar"),
    ("codes", ("--help",), "cli"),
    ("replay", ("--help",), "cli"),
    ("eval", ("--help",), "cli"),
    ("gateway", ("--config", "gateway.yaml"), "mcp"),
    ("demo", ("--no-dashboard", "--sessions", "1"), "demo"),
]


class TestMissingExtra:
    """On a core install each command either runs or says, in one line, which extra it needs."""

    @pytest.mark.parametrize(("command", "args", "extra"), NEEDS, ids=[n[0] for n in NEEDS])
    def test_one_line_names_the_extra(
        self, command: str, args: tuple[str, ...], extra: str
    ) -> None:
        """Exit 1 and one line on stderr: the command, the extra, the pip command."""
        done = run_without(EXTRAS, command, *args)
        assert done.returncode == 1, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert f"callgate {command} needs the [{extra}] extra" in done.stderr
        assert f"pip install 'callgate[{extra}]'" in done.stderr

    @pytest.mark.parametrize("command", ["verify", "approvals", "doctor"])
    def test_core_commands_run(self, command: str) -> None:
        """The core's own commands need no extra: their help works on a core install."""
        done = run_without(EXTRAS, command, "--help")
        assert done.returncode == 0, done.stderr
        assert f"Usage: callgate {command}" in done.stdout

    def test_help_works_without_any_extra(self) -> None:
        """`callgate --help` on a core install lists the commands of every extra."""
        done = run_without(EXTRAS, "--help")
        assert done.returncode == 0, done.stderr
        assert "dashboard" in done.stdout and "sidecar" in done.stdout

    def test_an_unrelated_import_error_is_not_blamed_on_an_extra(self) -> None:
        """A missing module that is one of callgate's own is not reported as an extra to install."""
        done = run_without(("analytics.render",), "report", "--help")
        assert done.returncode == 1
        assert "needs the" not in done.stderr
        assert "ModuleNotFoundError: No module named 'analytics.render'" in done.stderr
