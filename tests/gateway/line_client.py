"""A raw JSON-RPC client of a stdio gateway: one line per message, answers waited for with a bound."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from callgate.gateway.demo import gateway_command

REPO = Path(__file__).resolve().parents[2]

INITIALIZE = {
    "jsonrpc": "2.0",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class LineClient:
    """``callgate gateway --config config`` as a child whose stdin and stdout are pipes."""

    def __init__(self, config: Path) -> None:
        command = gateway_command(config)
        self.process = subprocess.Popen(
            [command.command, *command.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=command.cwd,
            # The upstreams of the tests are ``python -m tests.gateway...``: the repository on the path.
            env={**os.environ, **(command.env or {}), "PYTHONPATH": str(REPO)},
        )
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self._buffer = b""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._selector.close()

    def send(self, message: dict[str, Any] | str) -> None:
        """Write one message (a dict, or raw text for what a dict cannot say)."""
        text = message if isinstance(message, str) else json.dumps(message)
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode() + b"\n")
        self.process.stdin.flush()

    def answer(self, request_id: Any, timeout: float = 60.0) -> tuple[dict[str, Any], list[Any]]:
        """The answer to ``request_id``, and the notifications that came before it."""
        notes: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if message.get("id") == request_id and "method" not in message:
                    return message, notes
                notes.append(message)
            left = deadline - time.monotonic()
            if left <= 0 or not self._selector.select(left):
                raise TimeoutError(f"no answer to {request_id!r} in {timeout} s")
            assert self.process.stdout is not None
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                raise EOFError(f"the gateway ended before answering {request_id!r}")
            self._buffer += chunk

    def call(self, request_id: Any, message: dict[str, Any] | str) -> dict[str, Any]:
        self.send(message)
        return self.answer(request_id)[0]

    def handshake(self) -> None:
        self.call(0, {**INITIALIZE, "id": 0})
        self.send(INITIALIZED)
