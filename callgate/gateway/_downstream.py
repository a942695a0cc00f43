"""What the downstream transports read passes ``_json.rewrite`` before the SDK parses it.

``FilteredLines`` wraps the stdio server's stdin; ``DuplicateKeys`` is an ASGI middleware for
streamable HTTP that reads a POST body (at most ``MAX_BODY`` bytes: more is 413), rewrites it, and
hands the SDK the result.
"""

from __future__ import annotations

import io
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from callgate.gateway._json import rewrite

__all__ = ["MAX_BODY", "DuplicateKeys", "FilteredLines"]

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
