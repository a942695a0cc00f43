"""Installed size and package count of the core and of each extra, and what ``callgate --help`` costs.

    python bench/install.py [--extras core,otlp,...] [--cold]

For each row: a fresh virtual environment, callgate's wheel (built from this tree) installed with
that one extra, then the size of the environment's ``site-packages`` (``.pyc`` included: pip
compiles by default) and the number of distributions in it (callgate included, pip not: the venv
is made without it). Dependencies come from a local wheel cache (``CALLGATE_WHEEL_CACHE``, the one
``tests/test_install.py`` fills), so sizes do not depend on the network; ``--cold`` instead times a
``pip install --no-cache-dir`` from the index, as a new user's machine does it.

The ``--help`` row runs ``python -m callgate --help`` in this tree ten times and reports the median
wall time and the number of modules it imported.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(
    os.environ.get("CALLGATE_WHEEL_CACHE", Path.home() / ".cache" / "callgate-test-wheels")
)
EXTRAS = (
    "core",
    "cli",
    "otlp",
    "otlp-grpc",
    "sidecar",
    "analytics",
    "dashboard",
    "clickhouse",
    "redis",
    "mcp",
    "pydantic-ai",
    "openai-agents",
    "langgraph",
    "demo",
    "all",
    "dev",
)


def pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
    )


def build_wheel(out: Path) -> Path:
    source = out / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("analytics", "callgate", "dashboards", "guard", "telemetry"):
        shutil.copytree(
            ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    done = pip("wheel", "--no-deps", "--no-cache-dir", "-w", str(out / "dist"), str(source))
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return next((out / "dist").glob("callgate-*.whl"))


def size_mb(path: Path) -> float:
    total = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return total / 1e6


def measure(wheel: Path, extra: str, work: Path, *, cold: bool) -> dict[str, object]:
    venv = work / f"venv-{extra}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    requirement = str(wheel) if extra == "core" else f"callgate[{extra}] @ {wheel.as_uri()}"
    target = ("--python", str(venv / "bin" / "python"))
    started = time.perf_counter()
    if cold:
        done = pip(*target, "install", "--no-cache-dir", requirement)
    else:
        offline = (*target, "install", "--no-index", "--find-links", str(CACHE), requirement)
        done = pip(*offline)
        if done.returncode != 0:
            CACHE.mkdir(parents=True, exist_ok=True)
            fetched = pip("download", "--dest", str(CACHE), "--find-links", str(CACHE), requirement)
            for stale in CACHE.glob("callgate-*.whl"):
                stale.unlink()
            if fetched.returncode != 0:
                raise SystemExit(fetched.stderr)
            started = time.perf_counter()
            done = pip(*offline)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    listing = pip(*target, "list", "--format=json")
    packages = [p["name"] for p in json.loads(listing.stdout)]
    site = next(venv.glob("lib/python*/site-packages"))
    row = {
        "extra": extra,
        "packages": len(packages),
        "site_packages_mb": round(size_mb(site), 1),
        "install_seconds": round(seconds, 1),
        "cold": cold,
    }
    shutil.rmtree(venv)
    return row


def help_cost() -> dict[str, object]:
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "import callgate.cli\n"
        "try:\n    callgate.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(len(sys.modules), file=sys.stderr)\n"
    )
    walls, modules = [], 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(10):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        )
        walls.append(time.perf_counter() - started)
        modules = int(done.stderr.strip().splitlines()[-1])
    return {"help_wall_seconds_median": round(statistics.median(walls), 3), "modules": modules}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default=",".join(EXTRAS))
    parser.add_argument("--cold", action="store_true", help="pip --no-cache-dir from the index")
    args = parser.parse_args()
    print(json.dumps(help_cost()), flush=True)
    with tempfile.TemporaryDirectory(prefix="callgate-bench-") as tmp:
        work = Path(tmp)
        wheel = build_wheel(work)
        for extra in args.extras.split(","):
            print(json.dumps(measure(wheel, extra, work, cold=args.cold)), flush=True)


if __name__ == "__main__":
    main()
