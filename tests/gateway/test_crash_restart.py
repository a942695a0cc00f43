"""A stdio gateway killed mid-write and restarted never lets the re-proposed write run again.

The agent host launches ``callgate gateway`` over stdio; each process draws a new session id.
The write reaches the upstream (a bank that does not deduplicate), which records the payment and
hangs; the gateway is killed with SIGKILL. The host restarts it and proposes the same call: the
claim the dead process left in the SQLite store still holds it, because a write's key is its
principal's, not its session's. The answer is IN_PROGRESS (within the claim's lease), carrying
the same key, and the bank still has one payment.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from mcp.types import LATEST_PROTOCOL_VERSION

from callgate.gateway.demo import gateway_command

HERE = Path(__file__).parent


def bank_config(tmp: Path) -> Path:
    env = (
        f'EFFECTS_FILE: "{tmp / "effects.txt"}", HANG_FILE: "{tmp / "hang"}", '
        f'PID_FILE: "{tmp / "upstream.pid"}"'
    )
    config = tmp / "gateway.yaml"
    config.write_text(f"""\
store: {tmp / "gateway.db"}
upstreams:
  bank:
    command: [python, "{HERE / "hanging_write_upstream.py"}"]
    env: {{{env}}}
    namespace: bank
    timeout: 15
principals:
  bot:
    tools: ["*"]
serve:
  stdio: {{principal: bot}}
""")
    return config


class StdioGateway:
    """``callgate gateway`` as a child process, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, config: Path) -> None:
        command = gateway_command(config)
        self.process = subprocess.Popen(
            [command.command, *command.args],
            cwd=command.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        assert self.process.stdout is not None
        self.reader = threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True)
        self.reader.start()
        self.next_id = 0
        self.request(
            "initialize",
            {
                "protocolVersion": LATEST_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "crash-test", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.lines.put(line)

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any], *, wait: bool = True) -> Any:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        if not wait:
            return None
        while True:
            message = json.loads(self.lines.get(timeout=90))
            if message.get("id") == self.next_id:
                return message["result"]

    def pay(self, invoice: str, *, wait: bool = True) -> Any:
        result = self.request(
            "tools/call", {"name": "bank_pay", "arguments": {"invoice": invoice}}, wait=wait
        )
        return None if result is None else result["_meta"]["callgate"]

    def close(self) -> None:
        """Close stdin (a stdio server's cue to exit), wait for the process, then its pipes."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        self.process.stdout.close()


def payments(tmp: Path) -> list[str]:
    path = tmp / "effects.txt"
    return path.read_text().splitlines() if path.exists() else []


def end_upstream(tmp: Path) -> None:
    """The killed gateway's upstream child may outlive it: end it by the pid it wrote."""
    pid_file = tmp / "upstream.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        pid_file.unlink()


class TestStdioGatewayRestart:
    def test_a_restarted_gateway_does_not_pay_twice(self, tmp_path: Path) -> None:
        """SIGKILL while the payment hangs upstream; the restarted gateway answers the same call
        IN_PROGRESS with the same key, and the bank has one payment."""
        config = bank_config(tmp_path)
        (tmp_path / "hang").touch()
        first = StdioGateway(config)
        try:
            first.pay("INV-7", wait=False)
            deadline = time.monotonic() + 60
            while not payments(tmp_path):
                assert time.monotonic() < deadline, "the payment never reached the upstream"
                time.sleep(0.02)
            first.process.send_signal(signal.SIGKILL)
            assert first.process.wait(timeout=30) == -signal.SIGKILL
        finally:
            first.close()
            end_upstream(tmp_path)
        (tmp_path / "hang").unlink()  # a second run would now answer: it must not happen

        restarted = StdioGateway(config)
        try:
            answer = restarted.pay("INV-7")
            again = restarted.pay("INV-7")
        finally:
            restarted.close()
            end_upstream(tmp_path)
        assert answer["code"] == "IN_PROGRESS", answer
        assert again["code"] == "IN_PROGRESS"
        assert payments(tmp_path) == ["paid INV-7"]
