"""One body for sync and async calls: the pipeline awaits the world through the call's waiter.

The loop over the stages and the execute stage are written once, as coroutines. A sync handler is
simply called; the only points where they wait on the world (a coroutine handler, the backoff
between attempts) go through ``call.waiter``:

- ``BLOCKING`` (``Guard.execute``) never suspends: a coroutine handler runs under its own
  ``asyncio.run``, backoff is ``clock.sleep``. The coroutine
  therefore finishes on its first step, and ``run_blocking`` takes its result without a loop.
- ``AWAITING`` (``Guard.aexecute``) awaits a coroutine handler on the caller's event loop and
  backs off with ``clock.asleep``.

So no stage has a sync twin and an async twin, and adding a driver means adding a waiter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol, TypeVar

from guard.clock import Clock

__all__ = ["AWAITING", "BLOCKING", "Waiter", "run_blocking"]

T = TypeVar("T")


class Waiter(Protocol):
    """How a call waits: for its tool's handler, and between attempts."""

    async def handler_result(self, running: Awaitable[Any], timeout: float | None) -> Any:
        """What a coroutine handler returns; it is cancelled after ``timeout`` seconds."""

    async def sleep(self, clock: Clock, seconds: float) -> None:
        """Wait ``seconds`` before the next attempt."""


class _Blocking:
    """Waits by blocking the calling thread; never suspends the coroutine it runs in."""

    __slots__ = ()

    async def handler_result(self, running: Awaitable[Any], timeout: float | None) -> Any:
        return asyncio.run(_bounded(running, timeout))

    async def sleep(self, clock: Clock, seconds: float) -> None:
        clock.sleep(seconds)


class _Awaiting:
    """Waits on the running event loop."""

    __slots__ = ()

    async def handler_result(self, running: Awaitable[Any], timeout: float | None) -> Any:
        return await _bounded(running, timeout)

    async def sleep(self, clock: Clock, seconds: float) -> None:
        await clock.asleep(seconds)


BLOCKING: Waiter = _Blocking()
AWAITING: Waiter = _Awaiting()


def run_blocking(body: Coroutine[Any, Any, T]) -> T:
    """The result of ``body``, which waits only through ``BLOCKING``: one step runs it to the end."""
    try:
        body.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    body.close()
    raise RuntimeError("a blocking call suspended: something awaited the event loop")


async def _bounded(awaitable: Any, timeout: float | None) -> Any:
    return await asyncio.wait_for(awaitable, timeout)
