"""The layering is a contract: each root package, imported whole in a fresh interpreter, loads
nothing of the layers above it nor of an extra it does not need; and a core install (every extra's
modules made unimportable) still runs the guard, the trail and the CLI's front door."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

EXTRAS = (
    "agents",
    "altair",
    "anyio",
    "chdb",
    "clickhouse_connect",
    "duckdb",
    "google",
    "grpc",
    "httpx",
    "httpx2",
    "langchain_core",
    "langgraph",
    "mcp",
    "mcp_types",
    "numpy",
    "opentelemetry.exporter",
    "opentelemetry.proto",
    "opentelemetry.sdk",
    "orjson",
    "pandas",
    "pyarrow",
    "pydantic_ai",
    "redis",
    "rich",
    "starlette",
    "streamlit",
    "uvicorn",
    "yaml",
)
"""Top-level modules only an extra installs (``pyproject.toml``): a core install has none."""

PROBE = """
import importlib, json, pkgutil, sys

class Blocked:
    '''Makes the modules of extras not installed unimportable, as on a core install.'''
    def __init__(self, names):
        self.names = names
    def find_spec(self, name, path=None, target=None):
        if any(name == n or name.startswith(n + ".") for n in self.names):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

def modules_of(package, skip):
    '''Every module of ``package`` whose name contains none of ``skip``.'''
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if not any(part in info.name for part in skip):
            names.append(info.name)
    return names

blocked = json.loads(sys.argv[1])
if blocked:
    sys.meta_path.insert(0, Blocked(blocked))
before = set(sys.modules)
exec(sys.argv[2])
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def loaded(code: str, *, blocked: tuple[str, ...] = (), cwd: Path = ROOT) -> list[str]:
    """The modules a fresh interpreter loads running ``code`` (``blocked`` made unimportable)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(blocked)), textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def among(names: list[str], roots: tuple[str, ...]) -> list[str]:
    """The names that are one of ``roots`` or inside one."""
    return [n for n in names if any(n == r or n.startswith(r + ".") for r in roots)]


LAYERS = [
    # (package, module names skipped as another extra's layer, roots it must never load)
    (
        "guard",
        # The [redis] extra's room: redis-py itself loads OpenTelemetry.
        ("stores.redis", "stores._redis"),
        ("telemetry", "analytics", "dashboards", "callgate", "opentelemetry", *EXTRAS),
    ),
    (
        "telemetry",
        ("sidecar", "_otlp", "otlpjson", "telemetry.cli", "telemetry.export"),
        ("analytics", "dashboards", "callgate", *EXTRAS),
    ),
    ("analytics", ("clickhouse",), ("guard", "dashboards", "callgate", "streamlit", "grpc")),
    ("dashboards", (), ("guard", "callgate", "grpc", "opentelemetry.sdk")),
]


class TestLayers:
    """Each root package imports only its layer and the layers below."""

    @pytest.mark.parametrize(("package", "skip", "forbidden"), LAYERS)
    def test_package_loads_nothing_above_it(
        self, package: str, skip: tuple[str, ...], forbidden: tuple[str, ...]
    ) -> None:
        """Every module of `package` (but other extras' rooms) together loads none of `forbidden`."""
        names = loaded(f"for m in modules_of({package!r}, {skip!r}): importlib.import_module(m)")
        assert len(among(names, (package,))) > 3  # the walk found the package's modules
        assert among(names, forbidden) == []

    def test_the_probe_sees_a_forbidden_import(self) -> None:
        """The check can fail: the sidecar's gRPC transport loads grpc, which telemetry's core
        must not."""
        assert among(loaded("import telemetry.sidecar.grpc_server"), ("grpc",)) != []


class TestFrontDoor:
    """``import callgate`` and ``callgate --help`` load no layer until a name or command is used."""

    def test_import_callgate_loads_no_layer(self) -> None:
        """`import callgate` and its CLI load neither the guard nor OpenTelemetry nor any extra."""
        names = loaded("import callgate, callgate.cli")
        assert among(names, ("guard", "telemetry", "analytics", "dashboards", "pydantic")) == []
        assert among(names, ("opentelemetry", *EXTRAS)) == []

    def test_help_loads_no_command(self) -> None:
        """`callgate --help` lists every command and imports none of their modules."""
        code = """
            import callgate.cli
            try:
                callgate.cli.main(["--help"])
            except SystemExit as done:
                assert done.code == 0
            """
        names = loaded(code)
        assert among(names, ("guard", "telemetry", "analytics", "dashboards", *EXTRAS)) == []


class TestCoreInstall:
    """With every extra's modules unimportable, the core does all it promises."""

    def test_guard_and_trail_run_without_extras(self, tmp_path: Path) -> None:
        """The front door's guard writes its trail through `configure` with no extra installed."""
        code = f"""
            from callgate import build_shop, configure, parse_openai_chat
            trail = configure(service_name="core", trail_dir={str(tmp_path)!r}, masking_key="k")
            session = build_shop(observer=trail.observer).session("conv-1", "CUS-1")
            result = session.execute("get_order", {{"order_id": "ORD-1001"}}, call_id="c1")
            assert result.ok, result
            trail.shutdown()
            """
        names = loaded(code, blocked=EXTRAS)
        assert among(names, EXTRAS) == []
        lines = [line for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
        assert any('"stringValue":"get_order"' in line for line in lines)

    def test_otlp_without_the_extra_is_one_clear_error(self) -> None:
        """Asking for OTLP export without `[otlp]` raises one ImportError naming the extra."""
        code = """
            import telemetry
            try:
                telemetry.configure(otlp=True, masking_key="k", trail=False)
            except ImportError as error:
                assert "pip install 'callgate[otlp]'" in str(error), error
            else:
                raise AssertionError("no ImportError")
            """
        loaded(code, blocked=EXTRAS)
