"""``callgate doctor`` and the CLI find other distributions that own callgate's top-level names."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from callgate.doctor import ROOTS

ROOT = Path(__file__).resolve().parents[2]


def install_foreign(site: Path, dist: str, version: str, root: str, *, with_package: bool) -> None:
    """A distribution as pip leaves it in ``site``: dist-info with RECORD and top_level.txt, and
    (``with_package``) its own ``root`` package that Python would import."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{root}\n")
    record = [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    if with_package:
        (site / root).mkdir()
        (site / root / "__init__.py").write_text("def track(*args):\n    return 'theirs'\n")
        record.append(f"{root}/__init__.py,,")
    (info / "RECORD").write_text("\n".join(record) + "\n")


SITE = Path(sysconfig.get_paths()["purelib"])


def callgate(*args: str, path: list[Path]) -> subprocess.CompletedProcess[str]:
    """``python -m callgate ARGS`` with ``path`` then site-packages as its only path (first wins).

    ``-S`` skips ``.pth`` files: an editable install's import hook would otherwise serve
    ``analytics.cli`` from the checkout under another distribution's ``analytics``.
    """
    return subprocess.run(
        [sys.executable, "-S", "-m", "callgate", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": ":".join(str(p) for p in [*path, SITE]), "PATH": "/usr/bin:/bin"},
        cwd=path[0],
    )


class TestDoctor:
    """The report names the other distribution and what to do."""

    def test_clean_install_is_ok(self, tmp_path: Path) -> None:
        """With nothing else installing callgate's names, doctor exits 0 and lists them."""
        done = callgate("doctor", path=[ROOT])
        assert done.returncode == 0, done.stderr
        assert ", ".join(ROOTS) in done.stdout

    def test_a_shadowing_package_is_named(self, tmp_path: Path) -> None:
        """Another distribution's `analytics`, first on the path, is reported with its name."""
        install_foreign(tmp_path, "analytics-python", "2.3.0", "analytics", with_package=True)
        done = callgate("doctor", path=[tmp_path, ROOT])
        assert done.returncode == 1
        line = next(line for line in done.stderr.splitlines() if line.startswith("analytics:"))
        assert "analytics-python 2.3.0" in line and str(tmp_path) in line
        assert "pip uninstall analytics-python" in line
        assert not any(
            line.startswith(("guard:", "telemetry:")) for line in done.stderr.splitlines()
        )

    @pytest.mark.parametrize("root", ["guard", "telemetry"])
    def test_a_distribution_that_owns_the_name_is_named(self, tmp_path: Path, root: str) -> None:
        """A distribution that installs `root` too is reported even while callgate's copy wins."""
        install_foreign(tmp_path, root, "0.9", root, with_package=False)
        done = callgate("doctor", path=[ROOT, tmp_path])
        assert done.returncode == 1
        assert f"{root}: also installed by {root} 0.9" in done.stderr

    def test_the_cli_says_the_same_when_an_import_fails(self, tmp_path: Path) -> None:
        """`callgate load` with a foreign `analytics` exits 1 with doctor's line, not a traceback."""
        install_foreign(tmp_path, "analytics-python", "2.3.0", "analytics", with_package=True)
        done = callgate("load", "spans.jsonl", path=[tmp_path, ROOT])
        assert done.returncode == 1
        assert "Traceback" not in done.stderr
        assert "callgate load cannot start: analytics:" in done.stderr
        assert "analytics-python 2.3.0" in done.stderr
