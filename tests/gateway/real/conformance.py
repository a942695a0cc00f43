"""The MCP conformance suite against the reference ``everything`` server directly and through
``callgate gateway`` over streamable HTTP, every process on 127.0.0.1 and a free port.

``python -m tests.gateway.real.conformance`` prints the side-by-side table docs/gateway.md quotes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from callgate.gateway.config import PrincipalConfig
from tests.gateway.conftest import free_port, wait_for_port
from tests.gateway.real.install import Installed, install

__all__ = ["TOKEN", "Deployment", "deployed", "score", "table"]

HERE = Path(__file__).parent
TOKEN = "conformance-token-0123456789"
SUITE_TIMEOUT = 240.0
_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")
"""The time stamp the suite appends to each scenario's result folder."""


_READ_ALL = (
    ', resources: ["*"], prompts: ["*"]' if "resources" in PrincipalConfig.model_fields else ""
)
"""The suite reads every resource and prompt of the reference server: allowed where the gateway
proxies them (item 12 adds the principal's ``resources`` and ``prompts`` patterns; a gateway
without them refuses the keys)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Deployment:
    """The reference server and the gateway in front of it, both up."""

    direct_url: str
    """The reference server's own streamable HTTP endpoint."""
    gateway_url: str
    """The gateway's endpoint (needs the bearer token)."""
    relay_url: str
    """The gateway through ``bearer_proxy.py``, for clients that send no token."""


def _spawn(
    command: list[str], work: Path, name: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with (work / f"{name}.log").open("wb") as log:  # the child keeps its own copy of the handle
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=work,
        )


@contextmanager
def deployed(installed: Installed, work: Path) -> Iterator[Deployment]:
    """The reference server over HTTP, the gateway (HTTP upstream, HTTP downstream) and the relay."""
    server_port, gateway_port, relay_port = free_port(), free_port(), free_port()
    entry = installed.npm_entry("@modelcontextprotocol/server-everything")
    config = work / "gateway.yaml"
    config.write_text(
        f"""\
store: {json.dumps(str(work / "gateway.db"))}
telemetry: {{trail_dir: {json.dumps(str(work / "spans"))}}}
upstreams:
  everything:
    url: http://127.0.0.1:{server_port}/mcp
    timeout: 30
    connect_timeout: 60
principals:
  bot: {{tools: ["*"]{_READ_ALL}}}
serve:
  http:
    host: 127.0.0.1
    port: {gateway_port}
    tokens:
      - {{token: "{TOKEN}", principal: bot}}
"""
    )
    gateway = [
        sys.executable,
        "-c",
        "from callgate.cli import main; main()",
        "gateway",
        "--config",
        str(config),
        "--transport",
        "http",
    ]
    relay = [
        sys.executable,
        str(HERE / "bearer_proxy.py"),
        str(relay_port),
        f"http://127.0.0.1:{gateway_port}/mcp",
        TOKEN,
    ]
    started: list[subprocess.Popen[bytes]] = []
    try:
        node = [
            str(installed.node),
            "--require",
            str(HERE / "loopback.cjs"),
            str(entry),
            "streamableHttp",
        ]
        started.append(_spawn(node, work, "everything", {"PORT": str(server_port)}))
        wait_for_port(server_port, timeout=60)
        started.append(_spawn(gateway, work, "gateway"))
        started.append(_spawn(relay, work, "relay"))
        wait_for_port(gateway_port, timeout=60)
        wait_for_port(relay_port, timeout=60)
        yield Deployment(
            direct_url=f"http://127.0.0.1:{server_port}/mcp",
            gateway_url=f"http://127.0.0.1:{gateway_port}/mcp",
            relay_url=f"http://127.0.0.1:{relay_port}/mcp",
        )
    finally:
        for process in reversed(started):
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def score(installed: Installed, url: str, out: Path) -> dict[str, bool]:
    """Each scenario of the suite's active server set: passed (every check succeeded) or not."""
    suite = installed.npm_entry("@modelcontextprotocol/conformance")
    subprocess.run(
        [str(installed.node), str(suite), "server", "--url", url, "-o", str(out)],
        capture_output=True,
        timeout=SUITE_TIMEOUT,
        check=False,
    )
    passed: dict[str, bool] = {}
    for checks in sorted(out.glob("server-*/checks.json")):
        scenario = _STAMP.sub("", checks.parent.name.removeprefix("server-"))
        statuses = [check["status"] for check in json.loads(checks.read_text())]
        passed[scenario] = bool(statuses) and all(
            s in ("SUCCESS", "INFO", "WARNING") for s in statuses
        )
    return passed


def table(direct: dict[str, bool], gateway: dict[str, bool]) -> str:
    """The two scores side by side, as a markdown table with the totals last."""
    mark = {True: "pass", False: "fail"}
    rows = ["| scenario | `everything` directly | through `callgate gateway` |", "|---|---|---|"]
    rows += [
        f"| {name} | {mark[direct[name]]} | {mark[gateway.get(name, False)]} |" for name in direct
    ]
    rows.append(
        f"| **passed** | **{sum(direct.values())} of {len(direct)}** | **{sum(gateway.values())} of {len(gateway)}** |"
    )
    return "\n".join(rows)


if __name__ == "__main__":
    installed = install()
    with tempfile.TemporaryDirectory() as folder, deployed(installed, Path(folder)) as deployment:
        direct = score(installed, deployment.direct_url, Path(folder) / "direct")
        gateway = score(installed, deployment.relay_url, Path(folder) / "gateway")
    print(table(direct, gateway))
