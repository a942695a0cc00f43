"""The stdio transport to an upstream, with a bound on each message it reads.

The SDK's stdio client reads a whole line, then parses it into pydantic models: a 50 MB result
costs about 300 MB of memory and seconds of parsing before the gateway could see its size. This one
reads the server's stdout in chunks and stops keeping a line past ``max_line`` bytes: the rest of
that line is counted and dropped as it arrives, and the request it answered gets a JSON-RPC error
carrying ``TOO_LARGE`` instead (the response id is found at either end of the line: SDKs write it
first or last). A line too large whose id cannot be found ends the connection, as a protocol breach.

Spawning, the writer and shutdown are the SDK's own (``mcp.client.stdio``); only the reader differs.

``RawCalls`` is the lean path of a ``tools/call``: the request goes out as one JSON line on the
process's stdin with an id of this module's own (never one the SDK's session uses), and the reader
takes the line that answers it before the SDK sees it, parsed once with orjson. No pydantic model,
memory stream or task stands between the pipe and the caller; everything else on the connection
(initialize, listings, notifications, the SDK's own requests) goes through the SDK's session.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import secrets
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import orjson
from anyio.abc import ByteSendStream
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

__all__ = [
    "TOO_LARGE",
    "NotSent",
    "RawCalls",
    "RawRefused",
    "TooLarge",
    "bounded_stdio_client",
    "too_large",
]

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


def _line_id(head: bytes | bytearray, tail: bytes | bytearray) -> str | int | None:
    """The id a response line names at its start or its end (None when neither names one)."""
    found = _HEAD.match(head) or _TAIL.search(tail)
    if found is None:
        return None
    raw = found.group(1)
    return raw[1:-1].decode() if raw.startswith(b'"') else int(raw)


def _replacement(request_id: str | int, limit: int) -> SessionMessage:
    error = types.ErrorData(code=TOO_LARGE, message=f"{_MARK} {limit}")
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


class NotSent(ConnectionError):
    """The connection had ended before a raw request was written: nothing reached the upstream."""


class RawRefused(Exception):
    """The upstream answered a raw request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


ProgressCallback = Callable[[float, float | None, str | None], Awaitable[None]]

_RAW_PREFIX = "callgate-" + secrets.token_hex(4) + "-"
"""The ids of raw requests: strings, where the SDK's session numbers its own."""


class RawCalls:
    """Requests sent on one stdio connection past the SDK's session (see the module's doc).

    ``request`` raises ``NotSent`` when the connection ended before anything was written
    (nothing reached the upstream), ``anyio.EndOfStream`` when it ended while the request was out,
    ``RawRefused`` for an error answer and ``TooLarge`` for an answer dropped as it arrived."""

    def __init__(
        self, *, on_log: Callable[[types.LoggingMessageNotificationParams], Awaitable[None]]
    ) -> None:
        self._on_log = on_log
        self._send: Callable[[bytes], Awaitable[None]] | None = None
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._progress: dict[str, ProgressCallback] = {}
        self._ids = itertools.count(1)
        self._ended = False
        self._notes: set[asyncio.Task[None]] = set()

    def bind(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self._send = send

    async def request(
        self, method: str, params: dict[str, Any], *, on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """``method`` with ``params``; the answer's ``result`` as parsed."""
        if self._ended or self._send is None:
            raise NotSent("the connection has ended")
        request_id = f"{_RAW_PREFIX}{next(self._ids)}"
        if on_progress is not None:
            meta = params.get("_meta")
            params = {**params, "_meta": {**(meta or {}), "progressToken": request_id}}
            self._progress[request_id] = on_progress
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = answer
        line = orjson.dumps(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        try:
            await self._send(line + b"\n")
            return await answer
        except BaseException:
            # Abandoned (a deadline, a cancelled caller: awaiting it cancelled the future too)
            # before any answer came: tell the upstream, as the SDK's session does.
            unanswered = not answer.done() or answer.cancelled()
            if unanswered and not self._ended:
                self._cancel(request_id)
            raise
        finally:
            self._waiting.pop(request_id, None)
            self._progress.pop(request_id, None)

    def _cancel(self, request_id: str) -> None:
        """Tell the upstream an abandoned request is cancelled (as the SDK's session does)."""
        note = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the gateway abandoned the call"},
        }
        send = self._send
        if send is not None:
            task = asyncio.get_running_loop().create_task(_run(send(orjson.dumps(note) + b"\n")))
            self._notes.add(task)  # held until done: the loop keeps only a weak reference
            task.add_done_callback(self._notes.discard)
            task.add_done_callback(_quiet)

    def owns(self, request_id: str | int | None) -> bool:
        return isinstance(request_id, str) and request_id in self._waiting

    async def take(self, line: bytes | bytearray) -> bool:
        """Whether ``line`` answers a raw request, or reports on one (progress, a log message
        while one is out); if so, it is handled. The reader awaits this before reading on, so
        what the upstream sent before its answer reaches the client before the answer does."""
        if not self._waiting:
            return False
        if self._progress and b"notifications/progress" in line and await self._progressed(line):
            return True
        if b"notifications/message" in line and await self._logged(line):
            return True
        if not self.owns(_line_id(line[:_EDGE], line[-_EDGE:])):
            return False
        message = _loads(line)
        request_id = message.get("id") if isinstance(message, dict) else None
        answer = self._waiting.get(request_id) if isinstance(request_id, str) else None
        if answer is None or "method" in message:
            return self._garbled(line)
        if answer.done():
            return True
        error, result = message.get("error"), message.get("result")
        if isinstance(error, dict):
            code, text = error.get("code"), error.get("message")
            answer.set_exception(
                RawRefused(code if isinstance(code, int) else -32603, str(text or ""))
            )
        elif isinstance(result, dict):
            answer.set_result(result)
        else:
            answer.set_exception(RawRefused(-32603, "a response with neither result nor error"))
        return True

    def _garbled(self, line: bytes | bytearray) -> bool:
        """A line that names a raw request's id but is no answer the reader can use: the request
        fails as if the connection had ended (the upstream may have acted)."""
        request_id = _line_id(line[:_EDGE], line[-_EDGE:])
        if not self.owns(request_id) or isinstance(_loads(line), dict):
            return False  # a message that merely looks like an answer: the SDK's
        answer = self._waiting[str(request_id)]
        if not answer.done():
            log.warning("an unreadable answer to a tools/call")
            answer.set_exception(anyio.EndOfStream())
        return True

    async def _logged(self, line: bytes | bytearray) -> bool:
        message = _loads(line)
        if not isinstance(message, dict) or message.get("method") != "notifications/message":
            return False
        try:
            params = types.LoggingMessageNotificationParams.model_validate(message.get("params"))
        except ValueError:
            return False  # the SDK's to report
        try:
            await self._on_log(params)
        except Exception:
            log.debug("a log message was not relayed", exc_info=True)
        return True

    async def _progressed(self, line: bytes | bytearray) -> bool:
        message = _loads(line)
        params = message.get("params") if isinstance(message, dict) else None
        token = params.get("progressToken") if isinstance(params, dict) else None
        callback = self._progress.get(token) if isinstance(token, str) else None
        if callback is None or not isinstance(params, dict):
            return False
        progress, total, text = params.get("progress"), params.get("total"), params.get("message")
        if not isinstance(progress, int | float):
            return True
        try:
            await callback(
                progress,
                total if isinstance(total, int | float) else None,
                text if isinstance(text, str) else None,
            )
        except Exception:  # a client that went away must not fail the upstream's call
            log.debug("progress was not relayed", exc_info=True)
        return True

    def too_large(self, request_id: str | int | None, limit: int) -> bool:
        """Whether an oversized line answered a raw request; if so, that request fails."""
        if not self.owns(request_id):
            return False
        answer = self._waiting[str(request_id)]
        if not answer.done():
            answer.set_exception(TooLarge(limit))
        return True

    def end(self) -> None:
        """The connection ended: every request out fails, and none is sent any more."""
        self._ended = True
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(anyio.EndOfStream())


def _loads(line: bytes | bytearray) -> Any:
    """``line`` parsed (orjson; integers past 64 bits by the standard parser), or None."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line)
    except ValueError:
        return None


def _direct(stdin: ByteSendStream) -> Callable[[bytes], Awaitable[None]]:
    """Writes to the process's stdin. On asyncio, straight to its stream writer: anyio's
    ``send`` also yields to the loop once per write (a cancel-shielded checkpoint), a whole
    loop turn per call; a broken pipe still surfaces as an ``OSError``."""
    writer = getattr(stdin, "_stream", None)
    if not isinstance(writer, asyncio.StreamWriter):
        return stdin.send

    async def send(data: bytes) -> None:
        writer.write(data)
        await writer.drain()

    return send


async def _unrelayed(params: types.LoggingMessageNotificationParams) -> None:
    log.info("upstream logged (%s): %s", params.level, params.data)


async def _run(awaitable: Awaitable[None]) -> None:
    await awaitable


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("a raw notification failed", exc_info=task.exception())


@asynccontextmanager
async def bounded_stdio_client(
    server: StdioServerParameters, *, max_line: int, raw: RawCalls | None = None
) -> AsyncIterator[TransportStreams]:
    """``mcp.client.stdio.stdio_client`` whose reader keeps at most ``max_line`` bytes a line;
    ``raw`` gets this connection's raw requests (see ``RawCalls``)."""
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
    calls = raw if raw is not None else RawCalls(on_log=_unrelayed)
    assert process.stdin is not None
    calls.bind(_direct(process.stdin))

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
                                request_id = _line_id(head, tail)
                                if request_id is None:
                                    log.error("an oversized message without an id: disconnecting")
                                    return
                                if not calls.too_large(request_id, max_line):
                                    await read_writer.send(_replacement(request_id, max_line))
                                dropping = False
                            elif await calls.take(line):
                                pass  # a raw request's answer, handed to its caller
                            elif line.strip():
                                await read_writer.send(_parse_line(line.decode()))
                            line.clear()
                            start = end + 1
                finally:
                    calls.end()
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
