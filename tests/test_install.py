"""The wheel as a user installs it: a fresh virtual environment, the core alone or with an extra.

The wheel is built from this tree; its dependencies come from a local wheel cache
(``CALLGATE_WHEEL_CACHE``, default ``~/.cache/callgate-test-wheels``) that ``pip download`` fills
from PyPI the first time, so later runs install offline (``--no-index``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("CALLGATE_WHEEL_CACHE", Path.home() / ".cache" / "callgate-test-wheels")
)
PACKAGES = ("analytics", "callgate", "dashboards", "guard", "telemetry")

CORE_ALLOWED = {
    "annotated-types",
    "callgate",
    "click",
    "importlib-metadata",
    "opentelemetry-api",
    "pydantic",
    "pydantic-core",
    "typing-extensions",
    "typing-inspection",
    "zipp",
}
"""What ``pip install callgate`` may bring: the core's four dependencies and theirs."""

pytestmark = pytest.mark.slow


def pip(*args: str, python: Path | None = None) -> subprocess.CompletedProcess[str]:
    """This interpreter's pip (``--python``: acting on another environment)."""
    target = ["--python", str(python)] if python is not None else []
    return subprocess.run(
        [sys.executable, "-m", "pip", *target, "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """callgate's wheel, built from a copy of this tree (the build leaves nothing in the tree)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    dist = tmp_path_factory.mktemp("dist")
    built = pip("wheel", "--no-deps", "--no-cache-dir", "-w", str(dist), str(source))
    assert built.returncode == 0, built.stderr
    return next(dist.glob("callgate-*.whl"))


def install(venv: Path, requirement: str) -> None:
    """Install ``requirement`` into ``venv`` from the wheel cache, filling the cache if it must."""
    # --no-compile: byte-compiling Streamlit and pandas is most of an install's time, and tests
    # that import them once gain nothing from it
    offline = ("install", "--no-compile", "--no-index", "--find-links", str(CACHE), requirement)
    if pip(*offline, python=venv / "bin" / "python").returncode == 0:
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    _forget_callgate()
    for _ in range(
        2
    ):  # one retry: an index that answers "no versions" once is not the test's subject
        fetched = pip("download", "--dest", str(CACHE), "--find-links", str(CACHE), requirement)
        if fetched.returncode == 0:
            break
    assert fetched.returncode == 0, fetched.stderr
    _forget_callgate()
    done = pip(*offline, python=venv / "bin" / "python")
    assert done.returncode == 0, done.stderr


def _forget_callgate() -> None:
    """Keep only dependencies in the cache: a callgate wheel there would be an older tree's."""
    for stale in CACHE.glob("callgate-*.whl"):
        stale.unlink()


def fresh_venv(path: Path) -> Path:
    """A new virtual environment without pip (this interpreter's pip installs into it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path


def installed(venv: Path) -> set[str]:
    """The normalised names of every distribution in ``venv``."""
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps(sorted({d.metadata['Name'] for d in m.distributions()})))"
    )
    out = subprocess.run(
        [venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return {re.sub(r"[-_.]+", "-", name).lower() for name in json.loads(out)}


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A program of ``venv``'s ``bin`` with a clean environment."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), "CALLGATE_MASKING_KEY": "k"}
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def foreign_wheel(directory: Path) -> Path:
    """A wheel of another distribution that installs ``analytics`` (as Segment's does)."""
    path = directory / "analytics_python-2.0.0-py3-none-any.whl"
    info = "analytics_python-2.0.0.dist-info"
    files = {
        "analytics/__init__.py": "def track(*args):\n    return 'segment'\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: analytics-python\nVersion: 2.0.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": "analytics\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr(f"{info}/RECORD", record)
    return path


def readme_example() -> str:
    """The README's embedding example, as written."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"## Embedding the guard.*?```python\n(.*?)```", text, flags=re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.fixture(scope="module")
def core(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with callgate and no extra."""
    venv = fresh_venv(tmp_path_factory.mktemp("core") / "venv")
    install(venv, str(wheel))
    return venv


class TestCoreInstall:
    """``pip install callgate``: the guard and the trail, nothing heavy."""

    def test_readme_example_runs_on_the_core(self, core: Path, tmp_path: Path) -> None:
        """The README's example runs in a fresh venv with no extra, writes the trail, and the
        venv holds only the allowed distributions."""
        venv = core
        assert installed(venv) <= CORE_ALLOWED, installed(venv) - CORE_ALLOWED
        (tmp_path / "example.py").write_text(readme_example())
        done = run(venv, "python", "example.py", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "ask a human about apr_" in done.stdout
        trail = (tmp_path / "callgate-trail").glob("*.jsonl")
        lines = [line for f in trail for line in f.read_text().splitlines()]
        assert lines and all(json.loads(line)["resourceSpans"] for line in lines)
        helped = run(venv, "callgate", "--help", cwd=tmp_path)
        assert helped.returncode == 0 and "dashboard" in helped.stdout
        missing = run(venv, "callgate", "dashboard", "--help", cwd=tmp_path)
        assert missing.returncode == 1
        assert "pip install 'callgate[dashboard]'" in missing.stderr
        assert run(venv, "callgate", "doctor", cwd=tmp_path).returncode == 0

    def test_doctor_finds_a_distribution_installed_over_callgate(
        self, core: Path, wheel: Path, tmp_path: Path
    ) -> None:
        """Another wheel that overwrites analytics/__init__.py is named by doctor and the CLI,
        and still named after callgate's files are restored over it (runs after the example)."""
        venv = core
        other = foreign_wheel(tmp_path)
        assert (
            pip("install", "--no-index", str(other), python=venv / "bin" / "python").returncode == 0
        )
        doctor = run(venv, "callgate", "doctor", cwd=tmp_path)
        assert doctor.returncode == 1
        assert "analytics: 1 of callgate's files were overwritten" in doctor.stderr
        assert "analytics-python 2.0.0" in doctor.stderr
        assert "pip uninstall analytics-python" in doctor.stderr
        load = run(venv, "callgate", "load", "x.jsonl", cwd=tmp_path)
        assert load.returncode == 1 and "callgate load cannot start: analytics:" in load.stderr
        restored = pip(
            "install", "--no-index", "--force-reinstall", "--no-deps", str(wheel),
            python=venv / "bin" / "python",
        )  # fmt: skip
        assert restored.returncode == 0, restored.stderr
        doctor = run(venv, "callgate", "doctor", cwd=tmp_path)
        assert doctor.returncode == 1
        assert "analytics: also installed by analytics-python 2.0.0" in doctor.stderr


class TestExtras:
    """An extra installs what its commands need, and they start."""

    def test_dashboard_and_sidecar_commands_start(self, wheel: Path, tmp_path: Path) -> None:
        """With [dashboard] and [sidecar], `callgate dashboard --help` and `callgate sidecar
        --help` run, and no other layer's packages were installed."""
        venv = fresh_venv(tmp_path / "venv")
        install(venv, f"callgate[dashboard,sidecar] @ {wheel.as_uri()}")
        names = installed(venv)
        assert {"streamlit", "duckdb", "grpcio"} <= names
        assert not names & {"mcp", "redis", "clickhouse-connect", "opentelemetry-sdk"}
        for command in ("dashboard", "sidecar", "load"):
            done = run(venv, "callgate", command, "--help", cwd=tmp_path)
            assert done.returncode == 0, done.stderr
            assert f"Usage: callgate {command}" in done.stdout

    def test_demo_extra_runs_the_demo(self, wheel: Path, tmp_path: Path) -> None:
        """`make demo`'s install ([demo] alone) runs the demo end to end over OTLP to a sidecar."""
        venv = fresh_venv(tmp_path / "venv")
        install(venv, f"callgate[demo] @ {wheel.as_uri()}")
        assert not installed(venv) & {"pytest", "mypy", "ruff", "playwright", "hypothesis"}
        out = tmp_path / "run"
        done = run(
            venv, "callgate", "demo", "--no-dashboard", "--otlp", "--sessions", "20",
            "--out", str(out), cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "20 sessions" in done.stdout and "callgate trace" in done.stdout
        assert (out / "callgate.duckdb").is_file()
