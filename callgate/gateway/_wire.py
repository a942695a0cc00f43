"""A transport wrapper that notices when an upstream connection has ended.

The SDK answers a request on a closed connection, one that closed while the request was out, and an
upstream's own JSON-RPC error -32000 all as ``MCPError(CONNECTION_CLOSED)``. What the gateway must
tell apart is whether a write may have reached the upstream: so it watches the read side of each
connection, and knows the connection is gone (and a request about to be sent would never arrive)
before it sends anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Self

import anyio
from mcp.client._transport import TransportStreams
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage

__all__ = ["watched"]


class _WatchedRead:
    """Passes every message through; sets ``ended`` when the stream ends, however it ends."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], ended: anyio.Event) -> None:
        self._inner = inner
        self._ended = ended

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except BaseException:
            self._ended.set()
            raise

    async def aclose(self) -> None:
        self._ended.set()
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


@asynccontextmanager
async def watched(
    transport: AbstractAsyncContextManager[TransportStreams], ended: anyio.Event
) -> AsyncIterator[TransportStreams]:
    """``transport``'s streams, with ``ended`` set once nothing more can arrive on them."""
    try:
        async with transport as (read, write):
            yield _WatchedRead(read, ended), write
    finally:
        ended.set()
