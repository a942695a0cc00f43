"""``callgate dashboard``: options, validation, and the server it starts."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dashboards import cli, start_server, wait_until_ready
from dashboards.server import free_port, streamlit_command
from dashboards.settings import DB_ENV


class FakeProcess:
    """Stands in for the Streamlit subprocess."""

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def poll(self) -> int:
        return 0


class TestCommand:
    def test_one_source_at_most(self) -> None:
        """--db and --clickhouse together is a usage error."""
        both = CliRunner().invoke(cli.dashboard, ["--db", "x.duckdb", "--clickhouse", "http://h"])
        assert both.exit_code == 2 and "not both" in both.output

    def test_default_database_is_the_loaders(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Without a source it reads $CALLGATE_DB, as `callgate load` and `report` do."""
        calls: list[dict[str, Any]] = []
        monkeypatch.setattr(cli, "start_server", lambda **kw: calls.append(kw) or FakeProcess())
        monkeypatch.setenv("CALLGATE_DB", str(tmp_path / "x.duckdb"))
        assert CliRunner().invoke(cli.dashboard, []).exit_code == 0
        assert calls[0]["db"] == tmp_path / "x.duckdb"
        monkeypatch.delenv("CALLGATE_DB")
        assert CliRunner().invoke(cli.dashboard, []).exit_code == 0
        assert calls[1]["db"] == Path(cli.DEFAULT_DB)

    def test_passes_settings_to_the_server(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """--db, --host, --port and --refresh reach start_server; it binds 127.0.0.1 by default."""
        calls: list[dict[str, Any]] = []

        def fake_start(**kwargs: Any) -> FakeProcess:
            calls.append(kwargs)
            return FakeProcess()

        monkeypatch.setattr(cli, "start_server", fake_start)
        monkeypatch.delenv("CALLGATE_STORE", raising=False)
        db = tmp_path / "calls.duckdb"
        result = CliRunner().invoke(cli.dashboard, ["--db", str(db), "--port", "8600"])
        assert result.exit_code == 0, result.output
        assert calls == [
            {
                "db": db,
                "clickhouse": None,
                "host": "127.0.0.1",
                "port": 8600,
                "refresh_seconds": 10,
                "confirmation_ttl_seconds": 900.0,
                "alerts": None,
                "store": None,
            }
        ]
        assert "does not exist yet" in result.output
        assert "http://127.0.0.1:8600" in result.output

    def test_streamlit_runs_headless_on_the_given_address(self) -> None:
        """The command line binds host and port, headless, without usage statistics."""
        command = streamlit_command(host="0.0.0.0", port=9000)
        assert command[1:4] == ["-m", "dashboards.launch", "run"]
        assert "--server.address=0.0.0.0" in command and "--server.port=9000" in command
        assert "--server.headless=true" in command
        assert "--browser.gatherUsageStats=false" in command


class TestServer:
    def test_start_server_serves_and_stops(self, fixture_db: Path, tmp_path: Path) -> None:
        """start_server returns a process that answers on its port until terminated."""
        port = free_port()
        with (tmp_path / "server.log").open("wb") as log:
            process = start_server(db=fixture_db, port=port, output=log)
            try:
                wait_until_ready(f"http://127.0.0.1:{port}", process=process)
                assert process.poll() is None
            finally:
                process.terminate()
                process.wait(timeout=10)

    def test_environment_carries_the_database(
        self, monkeypatch: pytest.MonkeyPatch, fixture_db: Path
    ) -> None:
        """The database path travels to Streamlit as an absolute path in the environment."""
        seen: dict[str, Any] = {}

        class Recorder:
            def __init__(self, args: list[str], **kwargs: Any) -> None:
                seen.update(kwargs)

        monkeypatch.setattr(subprocess, "Popen", Recorder)
        start_server(db=fixture_db, port=1)
        assert seen["env"][DB_ENV] == str(fixture_db.absolute())


CALLGATE = Path(sys.executable).parent / "callgate"


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out.extend(int(c) for c in (task / "children").read_text().split())
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class TestProcesses:
    def test_busy_port_is_a_message(self) -> None:
        """A taken port is named, with --port 0 as the way out, before Streamlit starts."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            result = CliRunner().invoke(cli.dashboard, ["--db", "x.duckdb", "--port", str(port)])
        assert result.exit_code == 1
        assert f"port {port} on 127.0.0.1 is already in use" in result.output
        assert "--port 0" in result.output

    @pytest.mark.parametrize(
        ("signum", "inherited_ignored"),
        [
            (signal.SIGTERM, False),
            (signal.SIGHUP, False),
            (signal.SIGINT, False),
            # Started in the background by a non-interactive shell: SIGINT arrives ignored.
            (signal.SIGINT, True),
        ],
    )
    def test_signal_stops_the_streamlit_child(
        self, fixture_db: Path, tmp_path: Path, signum: int, inherited_ignored: bool
    ) -> None:
        """`kill <pid>` of a real `callgate dashboard` leaves no Streamlit serving its port."""
        port = free_port()
        url = f"http://127.0.0.1:{port}"

        def ignore_sigint() -> None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

        with (tmp_path / "dashboard.log").open("wb") as log:
            command = [str(CALLGATE), "dashboard", "--db", str(fixture_db), "--port", str(port)]
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=log,
                preexec_fn=ignore_sigint if inherited_ignored else None,
            )
            try:
                wait_until_ready(url, process=process, timeout=60)
                children = _children(process.pid)
                assert children, "callgate dashboard runs Streamlit as a child"
                process.send_signal(signum)
                assert process.wait(timeout=20) in (0, 128 + signum, -signum)
                deadline = time.monotonic() + 10
                while any(_alive(c) for c in children) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not any(_alive(c) for c in children), "the Streamlit child survived"
                with pytest.raises(OSError):
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()


class TestLaunch:
    def test_the_server_process_imports_the_pages_before_a_visitor(self) -> None:
        """dashboards.launch imports what the first render needs, outside any script run."""
        code = (
            "import sys; from dashboards import launch; launch.warm(); "
            "print(all(m in sys.modules for m in launch.WARM))"
        )
        done = subprocess.run(
            [sys.executable, "-W", "error", "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "True"
