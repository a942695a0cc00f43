"""Every shell and Python block of docs/*.md and README.md runs as a reader would copy it.

Each ```bash, ```sh, ```console and ```python block runs here from a temporary directory outside
the repository, with the installed package only (the venv's python and the `callgate` script next
to it; `examples/` and `bench/` are not importable). A block that is not meant to run as copied (a
server that serves until stopped, a model key, a checkout, a piece of a file) has the line
`<!-- excerpt: why -->` right before its fence. A fence without a language fails, so a new shell
block cannot slip past unlabelled. In a ```console block, `$ ` lines are the commands and the
other lines are output that must appear.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import DOCS, ROOT, Block, code_blocks

pytestmark = pytest.mark.slow

RUN = {"bash", "sh", "console", "python"}
BLOCKS = [block for path in DOCS for block in code_blocks(path)]
RUNNABLE = [block for block in BLOCKS if block.language in RUN and block.excerpt is None]
# What `pip install callgate` puts on the path (pyproject.toml's packages), from this tree.
PACKAGES = ("analytics", "callgate", "dashboards", "guard", "telemetry")
TIMEOUT = 120


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a reader's shell: the venv's scripts first, only the package importable."""
    site = tmp_path_factory.mktemp("site")
    for package in PACKAGES:
        (site / package).symlink_to(ROOT / package)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CALLGATE_", "OPENAI_"))}
    env["PYTHONPATH"] = str(site)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"  # the offline examples export no traces to OpenAI
    return env


def prepare(block: Block, directory: Path) -> None:
    """What the page tells the reader to have in the directory first."""
    if block.path.name == "domains.md":  # "copy its examples/ folder ... into the directory"
        shutil.copytree(
            ROOT / "examples", directory / "examples", ignore=shutil.ignore_patterns("__pycache__")
        )
    if block.path.name == "evaluation.md":  # "save that line as cases.jsonl"
        [case] = [b for b in code_blocks(block.path) if b.language == "json"]
        (directory / "cases.jsonl").write_text(case.text)


def run(block: Block, directory: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if block.language == "python":
        (directory / "example.py").write_text(block.text)
        command = [sys.executable, "example.py"]
    elif block.language == "console":
        lines = [line[2:] for line in block.text.splitlines() if line.startswith("$ ")]
        command = ["bash", "-e", "-o", "pipefail", "-c", "\n".join(lines)]
    else:
        command = [block.language, "-e", "-c", block.text]
    return subprocess.run(
        command,
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


class TestEveryBlockIsAccountedFor:
    """No shell or Python block is left neither run nor marked."""

    def test_every_fence_names_its_language(self) -> None:
        """A fence without a language would hide a shell block from the run."""
        assert [block.name for block in BLOCKS if not block.language] == []

    def test_every_excerpt_says_why(self) -> None:
        """An excerpt marker carries its reason."""
        assert [block.name for block in BLOCKS if block.excerpt == ""] == []

    def test_the_walk_throughs_run(self) -> None:
        """The blocks the issue named are run, not excused."""
        names = {(block.path.name, block.language) for block in RUNNABLE}
        assert {("domains.md", "python"), ("domains.md", "console")} <= names
        assert ("evaluation.md", "console") in names and ("README.md", "python") in names
        replay = [block for block in RUNNABLE if "replay" in block.text and "demo" in block.text]
        assert replay and "CALLGATE_MASKING_KEY" in replay[0].text and "--app" in replay[0].text


class TestBlocksRun:
    """Each runnable block, copied into an empty directory outside the repository."""

    @pytest.mark.parametrize("block", RUNNABLE, ids=[block.name for block in RUNNABLE])
    def test_block_runs(self, block: Block, installed: dict[str, str], tmp_path: Path) -> None:
        """It exits 0, and a console block prints the output it shows."""
        prepare(block, tmp_path)
        done = run(block, tmp_path, installed)
        assert done.returncode == 0, (block.name, done.stdout[-2000:], done.stderr[-2000:])
        if block.language == "console":
            shown = " ".join((done.stdout + done.stderr).split())
            for line in block.text.splitlines():
                if line.strip() and not line.startswith("$ "):
                    assert " ".join(line.split()) in shown, (block.name, line)


class TestTheDemoPrintsItsReplay:
    """`callgate demo` ends with the export and replay commands of its own run, and they work."""

    def test_the_printed_commands_replay_as_recorded(
        self, installed: dict[str, str], tmp_path: Path
    ) -> None:
        """Pasted into a shell in the same directory, they export the run and replay it unchanged."""
        demo = subprocess.run(
            ["callgate", "demo", "--no-dashboard", "--sessions", "200", "--out", "out"],
            cwd=tmp_path,
            env=installed,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        )
        lines = demo.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if "regression tests" in line)
        export, replay = (line.strip() for line in lines[start + 1 : start + 3])
        assert "CALLGATE_MASKING_KEY=" in export and " export " in export
        assert "--app callgate.fleet:demo_shop" in replay
        done = subprocess.run(
            ["bash", "-e", "-c", f"{export} > /dev/null\n{replay}"],
            cwd=tmp_path,
            env=installed,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert re.search(r"\b0 of [1-9][0-9]* calls with an expectation changed", done.stderr)
