"""The processes a soak run drives, for ``bench/soak.py``: start, find, kill, measure.

Everything runs through commands (``callgate sidecar``, ``callgate load --follow``,
``redis-server``, ``bench/soak_agent.py``), so the harness depends on no internal module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout} s")


def rss_kib(pid: int) -> int:
    """Resident set size of a live process, 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc), oldest first."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return sorted(found)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class Proc:
    """One long-lived process of the run, restarted by the harness under the same role."""

    role: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    """Every pid this role has had, first to last."""
    killed: list[int] = field(default_factory=list)
    """The pids the harness killed with SIGKILL."""

    def start(self) -> None:
        """Start the process, unless it runs: faults whose windows overlap (the harness late on
        a loaded machine) end with two starts, and a second process would fail to bind while
        the first, no longer tracked, outlived the run (the 10-minute run found one)."""
        if self.popen is not None and self.popen.poll() is None:
            return
        env = dict(os.environ, PYTHONPATH=str(ROOT), **self.env)
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT
            )
        self.pids.append(self.popen.pid)

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> int:
        """SIGKILL the current process and reap it; returns its pid."""
        assert self.popen is not None
        pid = self.popen.pid
        self.popen.kill()
        self.popen.wait()
        self.killed.append(pid)
        return pid

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it will not go. Returns the exit status."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode

    def wait(self, timeout: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def callgate(*args: str) -> list[str]:
    return [sys.executable, "-m", "callgate", *args]


def sidecar(home: Path, port: int, key: str) -> Proc:
    argv = callgate(
        "sidecar", "--dir", str(home / "sidecar"), "--grpc-port", "-1",
        "--http-port", str(port), "--processes", "2", "--max-bytes", str(4 * 1024 * 1024),
    )  # fmt: skip
    return Proc("sidecar", argv, home / "logs" / "sidecar.log", env={"CALLGATE_MASKING_KEY": key})


def loader(home: Path, sources: list[Path], *, follow: bool) -> Proc:
    """The follower loads the sidecar's files into ``soak.duckdb``; the one-shot load at the end
    loads the agents' trails into ``trail.duckdb`` (the two paths carry one call under the same
    ids, so one database would hold every span twice)."""
    rounds = ["--follow", "--interval", "0.5"] if follow else []
    db = home / ("soak.duckdb" if follow else "trail.duckdb")
    argv = callgate("load", *rounds, "--db", str(db), *map(str, sources))
    name = "loader" if follow else "trail-load"
    return Proc(name, argv, home / "logs" / f"{name}.log")


def approve(home: Path, approval_id: str, args: Any) -> int:
    """A human approves ``approval_id`` while no agent process holds it: ``callgate approvals
    approve`` on the SQLite store; on Redis the same decision through the store (the soak's keys
    carry a prefix the command does not take). The exit status (0: decided here)."""
    if args.store == "sqlite":
        argv = callgate("approvals", "approve", approval_id, "--store", str(home / "guard.db"),
                        "--by", "soak-operator", "--allow-writable-store")  # fmt: skip
        return subprocess.run(argv, capture_output=True, timeout=60).returncode
    from guard.stores.redis import open_redis_stores

    stores = open_redis_stores(f"redis://127.0.0.1:{args.redis_port}/0", prefix="soak:")
    try:
        action = stores.approvals.decide(
            approval_id, approve=True, by="soak-operator", now=time.time()
        )
    finally:
        stores.close()
    return 0 if action is not None and action.decided_by == "soak-operator" else 1


def redis(home: Path, port: int, *, volatile: bool) -> Proc:
    """A redis-server on ``port``: durable (every write in the append-only file before it is
    answered, so a SIGKILL loses nothing), or ``volatile`` (no persistence: a restart forgets)."""
    durable = ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    keep = ["--save", "", "--appendonly", "no"] if volatile else durable
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", *keep,
            "--dir", str(home)]  # fmt: skip
    return Proc("redis", argv, home / "logs" / "redis.log")


def agent(home: Path, index: int, options: dict[str, str]) -> Proc:
    argv = [sys.executable, str(BENCH / "soak_agent.py"), "--home", str(home),
            "--index", str(index)]  # fmt: skip
    for name, value in options.items():
        argv += [f"--{name}", value]
    return Proc(f"agent-{index}", argv, home / "logs" / f"agent-{index}.log")


def sidecar_worker(pid: int) -> int | None:
    """One of the sidecar's encoding worker processes (not multiprocessing's resource tracker)."""
    for child in children(pid):
        line = cmdline(child)
        if "multiprocessing" in line and "resource_tracker" not in line:
            return child
    return None


class Disk:
    """A small tmpfs mounted on a directory, so the harness can fill it (ENOSPC) and free it."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
            capture_output=True,
        )
        self.mounted = done.returncode == 0
        self._filler = path / ".filler.bin"

    def fill(self) -> None:
        """Take every free byte: writers on this disk now get ENOSPC."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            free = os.statvfs(self.path)
            with contextlib.suppress(OSError):
                os.posix_fallocate(fd, 0, free.f_bavail * free.f_frsize)
            for size in (4096, 1):  # whatever the allocation left, smaller and smaller
                block = bytes(size)
                with contextlib.suppress(OSError):
                    while os.write(fd, block):
                        pass
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def unmount(self, keep: Path) -> None:
        """Copy what was written to ``keep`` (a plain directory), then unmount."""
        if not self.mounted:
            return
        self.free()
        subprocess.run(["cp", "-a", f"{self.path}/.", str(keep)], check=True)
        subprocess.run(["umount", "-l", str(self.path)], check=False)
