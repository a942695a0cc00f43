"""Real upstreams for the gateway's tests: the demo shop over stdio, a low-level CRM over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


@pytest.fixture(scope="session")
def crm_url() -> Iterator[str]:
    """The low-level SDK server over streamable HTTP on a free local port."""
    port = free_port()
    process = subprocess.Popen([sys.executable, str(HERE / "raw_upstream.py"), str(port)])
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


def shop_config(
    tmp: Path,
    *,
    extra_tools: str = "",
    store: bool = True,
    rug: str | None = None,
    timeout: float = 1,
    refund_delay: float = 0,
) -> str:
    """A config text for the demo shop over stdio, effects counted in ``tmp/effects.txt``."""
    env = f'SHOP_EFFECTS: "{tmp / "effects.txt"}"'
    if refund_delay:
        env += f', SHOP_REFUND_DELAY: "{refund_delay}"'
    if rug is not None:
        (tmp / "rug.txt").write_text(rug)
        env += f', SHOP_RUG_FILE: "{tmp / "rug.txt"}"'
    return f"""\
{f"store: {tmp / 'gateway.db'}" if store else ""}
telemetry: {{trail_dir: "{tmp / "spans"}"}}
upstreams:
  shop:
    command: [python, -m, callgate.gateway.demo_upstream]
    env: {{{env}}}
    namespace: shop
    timeout: {timeout}
    tools:
      get_order: {{result_fields: [order_id, status, total_cents]}}
      fetch_page: {{untrusted_output: true}}
      big: {{}}
{extra_tools}
principals:
  bot:
    tools: ["*"]
  reader:
    tools: [shop_get_order]
serve:
  stdio: {{principal: bot}}
"""


def effects(tmp: Path) -> list[str]:
    path = tmp / "effects.txt"
    return path.read_text().splitlines() if path.exists() else []


from tests.guard.stores.conftest import redis_url  # noqa: E402  (the real redis-server fixture)

__all__ = ["redis_url"]


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An approvals store for the CLI tests: a SQLite file, or a flushed real redis-server."""
    if request.param == "sqlite":
        yield str(tmp_path / "guard.db")
        return
    url: str = request.getfixturevalue("redis_url")
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url
