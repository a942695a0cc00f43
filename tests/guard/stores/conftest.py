"""A real redis-server for the Redis stores' tests: started once per session, flushed per test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import redis

REDIS_SERVER = "redis-server"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_ping(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    import redis

    deadline = time.monotonic() + 10.0
    client = redis.Redis.from_url(url)
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"redis-server exited with {server.returncode}:\n{log.read_text()}")
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail(f"redis-server did not answer PING within 10 s:\n{log.read_text()}")
                time.sleep(0.02)
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server on 127.0.0.1 in a temporary directory; its URL."""
    executable = shutil.which(REDIS_SERVER) or shutil.which(REDIS_SERVER, path="/usr/sbin:/usr/bin")
    if executable is None:
        # A failure, not a skip: the Redis stores must not go untested by accident.
        pytest.fail("redis-server not found on PATH; install it (apt-get install redis-server)")
    port = _free_port()
    home = tmp_path_factory.mktemp("redis")
    log = home / "redis-server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                executable,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                # An RDB schedule the tests never reach: the server counts as persistent (the
                # stores refuse one that is not) without writing to disk while they run.
                "--save",
                "86400 1000000000",
                "--appendonly",
                "no",
                "--dir",
                str(home),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        _wait_for_ping(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client on an empty database, closed (with its pool) after the test."""
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    try:
        yield client
    finally:
        client.close()


# Redis judges leases on its own TIME, which a test cannot move: instead every claim's stamp is
# moved back by the same amount, which is what the server's clock passing would amount to.
_BACKDATE = """
local moved = 0
for _, key in ipairs(redis.call('KEYS', '*')) do
    if redis.call('TYPE', key).ok == 'hash' and redis.call('HEXISTS', key, 'leased_at') == 1 then
        redis.call('HINCRBYFLOAT', key, 'leased_at', -tonumber(ARGV[1]))
        moved = moved + 1
    end
end
return moved
"""


def backdate_leases(client: redis.Redis, seconds: float) -> int:
    """Let ``seconds`` pass on a real redis-server's lease clock for every claim it holds."""
    moved: int = client.eval(_BACKDATE, 0, repr(seconds))  # type: ignore[no-untyped-call]
    return moved
