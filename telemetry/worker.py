"""A background thread that takes work off the calling thread, in batches.

The calling thread only appends to a deque (tens of nanoseconds). The worker wakes when enough has
queued or a short interval has passed, drains the deque in batches and hands each batch to
``process``. When the queue is full, ``put`` either waits for room (``block=True``: the local trail,
which must be complete) or drops the item and counts it (``block=False``: exporters over the network,
which must never slow a tool call).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BatchWorker"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class BatchWorker(Generic[T]):
    """Runs ``process(batch)`` on a daemon thread for items ``put`` from any thread."""

    def __init__(
        self,
        process: Callable[[list[T]], None],
        *,
        name: str,
        capacity: int = 65_536,
        block: bool = True,
        batch_size: int = 128,
        interval: float = 0.05,
    ) -> None:
        self._process = process
        self._capacity = capacity
        self._block = block
        self._batch_size = batch_size
        self._interval = interval
        self._queue: collections.deque[T] = collections.deque()
        self._wake = threading.Event()
        self._room = threading.Condition()
        self._waiting = 0
        self._done = 0
        self._in_progress = 0
        self._dropped = 0
        self._drop_lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Items refused because the queue was full (only when ``block`` is False)."""
        return self._dropped

    @property
    def pending(self) -> int:
        """Items queued and not yet processed."""
        return len(self._queue)

    def put(self, item: T) -> bool:
        """Queue ``item``; False when it was dropped (queue full and not blocking, or closed)."""
        queue = self._queue
        if len(queue) >= self._capacity or self._closed:
            if self._closed or not self._block:
                with self._drop_lock:
                    self._dropped += 1
                return False
            self._wait_for_room()
        queue.append(item)
        if len(queue) >= self._batch_size and not self._wake.is_set():
            self._wake.set()
        return True

    def _wait_for_room(self) -> None:
        with self._room:
            self._waiting += 1
            try:
                while len(self._queue) >= self._capacity and self._thread.is_alive():
                    self._wake.set()
                    self._room.wait(0.05)
            finally:
                self._waiting -= 1

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            self._drain()
            if self._closed and not self._queue:
                break
        with self._room:
            self._room.notify_all()

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch: list[T] = []
            while queue and len(batch) < self._batch_size:
                batch.append(queue.popleft())
            self._in_progress = len(batch)
            try:
                self._process(batch)
            except Exception:  # telemetry never breaks a call, nor its own thread
                log.exception("telemetry worker %s failed on a batch", self._thread.name)
            with self._room:
                self._done += len(batch)
                self._in_progress = 0
                self._room.notify_all()
            time.sleep(0)  # let a waiting calling thread have the interpreter between batches

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is processed; False on timeout."""
        target = self._done + self._in_progress + len(self._queue)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._room:
            while self._done < target and self._thread.is_alive():
                self._wake.set()
                remaining = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
                if remaining <= 0:
                    return False
                self._room.wait(remaining)
        return self._done >= target or not self._thread.is_alive()

    def close(self, timeout: float | None = None) -> list[T]:
        """Process what is queued, then stop the thread. Returns what it had no time for (lost)."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout)
        abandoned: list[T] = []
        if self._thread.is_alive():
            while self._queue:
                abandoned.append(self._queue.popleft())
        return abandoned
