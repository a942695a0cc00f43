"""The stdio transport to an upstream, with a bound on each message it reads.

The SDK's stdio client reads a whole line, then parses it into pydantic models: a 50 MB result
costs about 300 MB of memory and seconds of parsing before the gateway could see its size. This one
reads the server's stdout in chunks and stops keeping a line past ``max_line`` bytes: the rest of
that line is counted and dropped as it arrives, and the request it answered gets a JSON-RPC error
carrying ``TOO_LARGE`` instead (the response id is found at either end of the line: SDKs write it
first or last). A line too large whose id cannot be found ends the connection, as a protocol breach.

Spawning, the writer and shutdown are the SDK's own (``mcp.client.stdio``); only the reader differs.
"""

from __future__ import annotations

import logging
import re
import secrets
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.client.stdio import (
    StdioServerParameters,
    _aclose_all,
    _create_platform_compatible_process,
    _drain_stdout,
    _get_executable_command,
    _parse_line,
    _stop_server_process,
    get_default_environment,
)
from mcp.shared.message import SessionMessage

__all__ = ["TOO_LARGE", "TooLarge", "bounded_stdio_client", "too_large"]

log = logging.getLogger("callgate.gateway")

TOO_LARGE = -32099
"""The JSON-RPC error code the reader puts in place of an oversized response."""

_MARK = "callgate-too-large-" + secrets.token_hex(8)
"""Marks the errors this process made: an upstream cannot forge one (nor hide behind one)."""

_HEAD = re.compile(
    rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")'
)
_TAIL = re.compile(rb',\s*"id"\s*:\s*(-?\d+|"[^"\\]{0,200}")\s*\}\s*$')
_EDGE = 512


class TooLarge(Exception):
    """The upstream's response was larger than the limit; it was dropped as it arrived."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a result of more than {size} bytes")
        self.size = size


def too_large(error: types.ErrorData | object) -> int | None:
    """The limit an oversized-response error names, or None for any other error."""
    message = getattr(error, "message", "")
    code = getattr(error, "code", None)
    if code != TOO_LARGE or not isinstance(message, str) or not message.startswith(_MARK):
        return None
    return int(message.rsplit(" ", 1)[1])


def _replacement(head: bytes, tail: bytes, limit: int) -> SessionMessage | None:
    found = _HEAD.match(head) or _TAIL.search(tail)
    if found is None:
        return None
    raw = found.group(1)
    request_id: str | int = raw[1:-1].decode() if raw.startswith(b'"') else int(raw)
    error = types.ErrorData(code=TOO_LARGE, message=f"{_MARK} {limit}")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, *, max_line: int
) -> AsyncIterator[TransportStreams]:
    """``mcp.client.stdio.stdio_client`` whose reader keeps at most ``max_line`` bytes a line."""
    command = await _get_executable_command(server.command)
    process = await _create_platform_compatible_process(
        command=command,
        args=server.args,
        env=get_default_environment() | (server.env or {}),
        errlog=sys.stderr,
        cwd=server.cwd,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def reader() -> None:
        assert process.stdout is not None
        line, head, tail, dropping = bytearray(), b"", b"", False
        try:
            async with read_writer:
                try:
                    async for chunk in process.stdout:
                        start = 0
                        while True:
                            end = chunk.find(b"\n", start)
                            piece = chunk[start:] if end < 0 else chunk[start:end]
                            if dropping:
                                tail = (tail + piece)[-_EDGE:]
                            else:
                                line += piece
                                if len(line) > max_line:  # stop keeping it: only its edges matter
                                    head, tail, dropping = (
                                        bytes(line[:_EDGE]),
                                        bytes(line[-_EDGE:]),
                                        True,
                                    )
                                    line.clear()
                            if end < 0:
                                break
                            if dropping:
                                message = _replacement(head, tail, max_line)
                                if message is None:
                                    log.error("an oversized message without an id: disconnecting")
                                    return
                                await read_writer.send(message)
                                dropping = False
                            elif line.strip():
                                await read_writer.send(_parse_line(line.decode()))
                            line.clear()
                            start = end + 1
                finally:
                    await _drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # our own shutdown, or the session is gone

    async def writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the session sees the end instead of a request hanging
        finally:
            writer_done.set()

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        group.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                read_stream.close()
                write_stream.close()
                with anyio.move_on_after(0.5):
                    await writer_done.wait()
                await _stop_server_process(process)
                await _aclose_all(read_stream, write_stream, read_writer, write_reader)
            group.cancel_scope.cancel()
