"""Start the dashboard as a Streamlit server in a subprocess, and wait until it answers.

Used by ``callgate dashboard``, the tests and the demo::

    process = start_server(db="calls.duckdb", port=8502)
    wait_until_ready("http://127.0.0.1:8502", process=process)
    ...
    process.terminate()
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

from .settings import DEFAULT_CONFIRMATION_TTL_SECONDS, DEFAULT_REFRESH_SECONDS, Settings

__all__ = [
    "APP",
    "PortInUseError",
    "check_port",
    "free_port",
    "start_server",
    "stop",
    "streamlit_command",
    "wait_until_ready",
]

APP = Path(__file__).with_name("app.py")
"""The Streamlit script."""


def streamlit_command(*, host: str, port: int) -> list[str]:
    """``streamlit run dashboards/app.py`` headless on ``host:port``, without telemetry, through
    :mod:`dashboards.launch` (the pages imported before the first visitor arrives)."""
    return [
        sys.executable,
        "-m",
        "dashboards.launch",
        "run",
        str(APP),
        "--server.headless=true",
        f"--server.address={host}",
        f"--server.port={port}",
        "--server.fileWatcherType=none",
        "--browser.gatherUsageStats=false",
        "--client.toolbarMode=viewer",
        "--logger.level=warning",
    ]


class PortInUseError(OSError):
    """The address the dashboard should bind is taken (often: another dashboard)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"port {port} on {host} is already in use (another dashboard or demo?): "
            "stop it, pick another with --port N, or use --port 0 for a free one"
        )
        self.host, self.port = host, port


def check_port(host: str, port: int) -> None:
    """Raise :class:`PortInUseError` when nothing could bind ``host:port`` right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        # As Tornado binds: a port left in TIME_WAIT by a server that just stopped is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise PortInUseError(host, port) from exc


def stop(process: subprocess.Popen[bytes], *, timeout: float = 10.0) -> int:
    """Terminate the server and wait for it; kill it if it does not stop within ``timeout``."""
    if process.poll() is None:
        process.terminate()
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


def start_server(
    *,
    db: str | os.PathLike[str] | None = None,
    clickhouse: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8501,
    refresh_seconds: int = DEFAULT_REFRESH_SECONDS,
    confirmation_ttl_seconds: float = DEFAULT_CONFIRMATION_TTL_SECONDS,
    alerts: str | os.PathLike[str] | None = None,
    store: str | os.PathLike[str] | None = None,
    output: IO[bytes] | int | None = None,
) -> subprocess.Popen[bytes]:
    """Start the dashboard on ``host:port`` reading ``db`` or ``clickhouse``; return the process.

    ``output`` receives the server's stdout and stderr (None: inherited). The caller owns the
    process: ``terminate()`` it when done.
    """
    settings = Settings(
        db=str(Path(db).absolute()) if db is not None else None,
        clickhouse=clickhouse,
        refresh_seconds=refresh_seconds,
        confirmation_ttl_seconds=confirmation_ttl_seconds,
        alerts=str(Path(alerts).absolute()) if alerts is not None else None,
        store=_store_spec(store),
    )
    env = {**os.environ, **settings.to_env()}
    return subprocess.Popen(
        streamlit_command(host=host, port=port), env=env, stdout=output, stderr=output
    )


def _store_spec(store: str | os.PathLike[str] | None) -> str | None:
    """A store path made absolute (the server runs elsewhere); a Redis URL as given."""
    if store is None:
        return None
    spec = str(store)
    return (
        spec
        if spec.startswith(("redis://", "rediss://", "unix://"))
        else str(Path(spec).absolute())
    )


def wait_until_ready(
    url: str, *, timeout: float = 30.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll ``url``'s health endpoint until it answers; fail early if ``process`` exits."""
    health = url.rstrip("/") + "/_stcore/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the dashboard exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(health, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"the dashboard did not answer at {health} within {timeout:.0f} s")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port
