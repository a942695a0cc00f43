"""The gateway's HTTP bearer check on the real server: any header bytes get 400/401, never a 500."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from callgate.gateway.demo import gateway_command
from telemetry.auth import presented_token
from tests.gateway.conftest import effects, free_port, shop_config, wait_for_port
from tests.telemetry.test_auth import HEADER_BYTES, TOKEN

_FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_CALL = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "shop_refund", "arguments": {"order_id": "ORD-1", "amount_cents": 1}},
    }
).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """``callgate gateway --transport http`` with one token (``TOKEN``), its port and directory."""
    tmp = tmp_path_factory.mktemp("gateway-auth")
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        shop_config(tmp)
        + f"  http:\n    port: {port}\n    tokens:\n      - {{token_env: GW_TOKEN, principal: bot}}\n"
    )
    command = gateway_command(config)
    process = subprocess.Popen(
        [command.command, *command.args, "--transport", "http"],
        cwd=str(tmp),
        env={**os.environ, "GW_TOKEN": TOKEN.decode()},
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, timeout=30)
        yield port, tmp
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=20)
    assert b"Traceback" not in stderr, stderr.decode("utf-8", "replace")


def post(port: int, *headers: bytes) -> tuple[int, bytes]:
    """POST a refund call to /mcp with these raw header lines; the status and the body."""
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    head += b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
    head += b"Content-Length: " + str(len(_CALL)).encode() + b"\r\n"
    data = head + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + _CALL
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        answer = b""
        while piece := sock.recv(65536):
            answer += piece
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


class TestHeaderBytes:
    """Non-UTF-8 and malformed header bytes in front of the gateway's MCP app."""

    @_FUZZ
    @given(header=HEADER_BYTES)
    def test_any_authorization_bytes_get_400_or_401(
        self, gateway: tuple[int, Path], header: bytes
    ) -> None:
        """A value that is not the token is answered 400 or 401, with no traceback, no effect."""
        port, tmp = gateway
        status, body = post(port, b"Authorization: " + header)
        if presented_token(header) == TOKEN:
            assert status not in (401, 500), (status, body)  # past the check: the SDK answers
        else:
            assert status in (400, 401), (status, body)
            assert b"Traceback" not in body
        assert effects(tmp) == []

    def test_non_utf8_token_bytes_are_401(self, gateway: tuple[int, Path]) -> None:
        """The issue's case: bytes that are not UTF-8 in Authorization are a clean 401."""
        port, tmp = gateway
        for header in (b"Bearer \xff\xfe", b"Bearer " + TOKEN + b"\xc3", b"\xc3(Bearer"):
            status, body = post(port, b"Authorization: " + header)
            assert status == 401, (header, status, body)
            assert json.loads(body)["error"] == "unauthorized"
        assert effects(tmp) == []

    @_FUZZ
    @given(header=HEADER_BYTES)
    def test_non_utf8_bytes_in_other_headers_are_no_500(
        self, gateway: tuple[int, Path], header: bytes
    ) -> None:
        """With the right token, stray bytes in another header never make a 500."""
        port, _ = gateway
        status, body = post(port, b"Authorization: Bearer " + TOKEN, b"X-Stray: " + header)
        assert status != 500 and b"Traceback" not in body, (status, body)
