"""What the downstream transports read passes ``_json.rewrite`` before the SDK parses it.

``FilteredLines`` wraps the stdio server's stdin; ``DuplicateKeys`` is an ASGI middleware for
streamable HTTP that reads a POST body (at most ``MAX_BODY`` bytes: more is 413), rewrites it, and
hands the SDK the result.

``event_loop_stdio`` serves stdin and stdout as pipes on the event loop. The SDK's stdio server reads
each line and writes and flushes each answer on a worker thread (``anyio.wrap_file``): three thread
hand-offs per call, most of what the hop cost on a loaded machine. Like the SDK, it moves fd 0 to
the null device and fd 1 to stderr while serving, so nothing else in the process writes into the
protocol; a stdin or stdout that is not a pipe, socket or terminal gets the SDK's threads instead.
"""

from __future__ import annotations

import asyncio
import io
import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import anyio.lowlevel

from callgate.gateway._json import rewrite

__all__ = ["MAX_BODY", "DuplicateKeys", "FilteredLines", "PipeLines", "PipeOut", "event_loop_stdio"]

MAX_LINE = 64 * 1024 * 1024
"""The longest line read from a stdio client (the SDK's own reader has no bound at all)."""

MAX_BODY = 8 * 1024 * 1024
"""The largest HTTP request body read (the SDK's own limit is 4 MiB by default)."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class FilteredLines:
    """This process's stdin as lines for ``mcp.server.stdio.stdio_server``, each rewritten."""

    def __init__(self) -> None:
        text = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
        self._lines = anyio.wrap_file(text)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._filtered()

    async def _filtered(self) -> AsyncIterator[str]:
        async for line in self._lines:
            kept = rewrite(line.rstrip("\n"))
            if kept is not None:
                yield kept + "\n"


class PipeLines:
    """Lines of a pipe read on the event loop, each rewritten (as ``FilteredLines``); a line
    ``taken`` returns True for (the lean ``tools/call`` path's) never reaches the SDK."""

    def __init__(
        self, reader: asyncio.StreamReader, taken: Callable[[bytes], bool] | None = None
    ) -> None:
        self._reader = reader
        self.taken = taken

    def __aiter__(self) -> AsyncIterator[str]:
        return self._filtered()

    async def _filtered(self) -> AsyncIterator[str]:
        while line := await self._reader.readline():
            if self.taken is not None and self.taken(line):
                continue
            kept = rewrite(line.decode("utf-8", errors="replace").rstrip("\n"))
            if kept is not None:
                yield kept + "\n"


class PipeOut:
    """A pipe written on the event loop, with the two methods the SDK's stdio writer calls;
    ``written`` sees each text the SDK writes."""

    def __init__(
        self, writer: asyncio.StreamWriter, written: Callable[[str], None] | None = None
    ) -> None:
        self.writer = writer
        self._writer = writer
        self.written = written

    async def write(self, text: str) -> None:
        if self.written is not None:
            self.written(text)
        self._writer.write(text.encode())

    async def flush(self) -> None:
        await self._writer.drain()


def _streamable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextmanager
def _claimed() -> Iterator[tuple[int, int]]:
    """Private copies of fds 0 and 1; meanwhile 0 reads the null device and 1 writes to stderr."""
    private_in, private_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield private_in, private_out
    finally:
        os.close(null)
        os.dup2(private_in, 0)
        os.dup2(private_out, 1)
        os.close(private_in)
        os.close(private_out)


@asynccontextmanager
async def event_loop_stdio() -> AsyncIterator[tuple[Any, Any] | None]:
    """``(stdin, stdout)`` for ``mcp.server.stdio.stdio_server`` as event-loop pipes, or None
    when they cannot be (not a pipe, or not the asyncio loop): then use ``FilteredLines``."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # another event loop (trio): the SDK's threads
        yield None
        return
    if not (_streamable(0) and _streamable(1)):
        yield None
        return
    with _claimed() as (private_in, private_out):
        reader = asyncio.StreamReader(limit=MAX_LINE)
        source = open(private_in, "rb", buffering=0, closefd=False)  # noqa: SIM115 - the transport closes it
        sink = open(private_out, "wb", buffering=0, closefd=False)  # noqa: SIM115 - the transport closes it
        read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), source
        )
        write_transport, protocol = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader()), sink
        )
        writer = asyncio.StreamWriter(write_transport, protocol, None, loop)
        try:
            yield PipeLines(reader), PipeOut(writer)
        finally:
            read_transport.close()
            write_transport.close()
            await anyio.lowlevel.checkpoint()  # the transports close their pipes on the next turn


class DuplicateKeys:
    """ASGI middleware: each HTTP POST body through ``rewrite`` before the app reads it."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)  # the client went away: let the app see it
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                await send({"type": "http.response.start", "status": 413, "headers": []})
                await send({"type": "http.response.body", "body": b"request body too large"})
                return
            if not message.get("more_body"):
                break
        kept = rewrite(body.decode("utf-8", errors="replace"))
        payload = (kept if kept is not None else "").encode()
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(payload)).encode()))
        delivered = False

        async def replay() -> MutableMapping[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": payload, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)
