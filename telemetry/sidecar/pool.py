"""Encoding worker processes for the sidecar (``callgate sidecar --processes N``).

The sidecar's per-request work (decode, encode, chained write) holds the GIL, so one process uses
one core. ``EncoderPool`` hands each request body to one of N spawned worker processes. A worker
owns its own ``SpanFileWriter`` (made by the ``writer_factory`` it was given: same directory,
prefix, size and chain key; its own files, named by its pid, and its own chain), decodes, encodes
and writes the line itself with an ``Ingest`` of its own, and sends back only the outcome.
The receiving process answers once that outcome is back, so an accepted request is still one
whose line is on disk.

Outcomes travel as plain tuples and become, in the receiving process, the exceptions the
single-process path raises: ``ValueError`` (or protobuf's ``DecodeError``) for a malformed request,
``WriteFailed`` (an ``Unavailable``) when the worker could not write its line. A worker that dies
breaks the executor: the requests it held are answered ``Unavailable`` (retryable) and the pool is
rebuilt for the next ones. Workers ignore SIGINT (the receiving process decides when to stop) and
flush, fsync and close their file when they exit (``multiprocessing.util.Finalize``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import util
from typing import Any

from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from telemetry.sidecar.ingest import JSON, Ingest
from telemetry.sidecar.limits import ByteBudget, Unavailable, WriteFailed
from telemetry.sidecar.proto import Encoded
from telemetry.spanfile import SpanFileWriter

__all__ = ["EncoderPool"]

log = logging.getLogger(__name__)

Outcome = tuple[str, int, int, str]
"""``(kind, spans, rejected, text)``: kind ``ok`` (text: the first rejected span's error),
``invalid``, ``decode``, ``unavailable`` (the write failed) or ``error`` (a bug; text says what)."""

_START_TIMEOUT = 120.0
"""Seconds the workers have to start together (import, make their writer) before start fails."""

_ingest: Ingest | None = None
"""The worker's own ingest core (set by ``_start``; only ever set in a worker process)."""
_ready: Any = None
"""The start barrier the worker's pings wait at (set by ``_start``, in a worker process)."""


def _start(writer_factory: Callable[[], SpanFileWriter], ready: Any) -> None:
    """Worker initializer: its own writer, closed (flushed, fsynced) when the worker exits."""
    global _ingest, _ready
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        writer = writer_factory()
    except BaseException:
        # The siblings waiting at the barrier learn it now. Left to the executor noticing this
        # worker's exit, they once waited out _START_TIMEOUT (121 s in a full test run).
        ready.abort()
        raise
    # Limits are the receiving process's: it holds the reservation while the body is here.
    _ingest = Ingest(writer, budget=ByteBudget(sys.maxsize))
    _ready = ready
    util.Finalize(writer, writer.close, exitpriority=10)


def _ping() -> int:
    """Held until every worker holds a ping, so N answers mean N workers that ran ``_start``.

    Without the barrier one fast worker can answer every ping while another is still starting;
    that one's writer is then made during a request (and a factory that fails, fails there).
    """
    if _ready is not None:
        try:
            _ready.wait(_START_TIMEOUT)
        except threading.BrokenBarrierError as error:  # a sibling died starting: the pool did
            raise BrokenProcessPool("another sidecar worker did not start") from error
    return os.getpid()


def _accept(kind: str, body: bytes) -> Outcome:
    """Worker side: decode, encode and write one request; its outcome, never an exception."""
    ingest = _ingest
    if ingest is None:  # pragma: no cover - the initializer always ran
        return ("error", 0, 0, "worker not initialized")
    try:
        accept = ingest.accept_json if kind == JSON else ingest.accept_protobuf
        encoded = accept(body)
    except Unavailable as error:  # the budget is unlimited here: only a failed write
        return ("unavailable", 0, 0, str(error))
    except DecodeError as error:
        return ("decode", 0, 0, str(error))
    except (ValueError, RecursionError) as error:  # UnicodeError is a ValueError
        return ("invalid", 0, 0, str(error))
    except Exception as error:  # a bug: the receiving process answers it as one
        log.exception("sidecar worker: request failed")
        return ("error", 0, 0, f"{type(error).__name__}: {error}")
    return ("ok", encoded.spans, encoded.rejected, encoded.error)


def _result(outcome: Outcome) -> Encoded:
    """The outcome as the single-process path would give it: a value, or the same exception."""
    kind, spans, rejected, text = outcome
    if kind == "ok":
        return Encoded(line="", spans=spans, rejected=rejected, error=text)
    if kind == "invalid":
        raise ValueError(text)
    if kind == "decode":
        raise DecodeError(text)
    if kind == "unavailable":
        raise WriteFailed(text)
    raise RuntimeError(text)


class EncoderPool:
    """N spawned processes that decode, encode and write requests, each to its own span files."""

    def __init__(self, processes: int, writer_factory: Callable[[], SpanFileWriter]) -> None:
        if processes < 1:
            raise ValueError(f"processes must be at least 1, not {processes}")
        self.processes = processes
        self._writer_factory = writer_factory
        self._lock = threading.Lock()
        self._executor: ProcessPoolExecutor | None = None
        self.restarts = 0
        """How many times a broken pool (a worker died) was replaced."""

    def _new_executor(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("spawn")
        executor = ProcessPoolExecutor(
            max_workers=self.processes,
            mp_context=context,
            initializer=_start,
            initargs=(self._writer_factory, context.Barrier(self.processes)),
        )
        # Workers start on demand; start them all now, so a bad writer fails here, not in a request.
        try:
            pings = [executor.submit(_ping) for _ in range(self.processes)]
            for ping in pings:
                ping.result()
        except BaseException:
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        return executor

    def start(self) -> EncoderPool:
        """Start the worker processes (and wait until each has its writer); returns self."""
        with self._lock:
            if self._executor is None:
                self._executor = self._new_executor()
        return self

    def accept(self, kind: str, body: bytes) -> Encoded:
        """Have a worker write ``body`` (``PROTOBUF`` or ``JSON``); what it wrote, with no line.

        Raises ``ValueError``/``DecodeError`` (malformed), ``WriteFailed`` (not written) or
        ``Unavailable`` (the worker died, or the pool is stopped): the single-process answers.
        """
        executor = self._executor
        if executor is None:
            raise Unavailable("the sidecar is stopping")
        try:
            outcome = executor.submit(_accept, kind, body).result()
        except BrokenProcessPool as error:
            self._replace(executor)
            raise Unavailable(f"an encoding worker died: {error}") from error
        except RuntimeError as error:  # submit after shutdown
            raise Unavailable(f"the sidecar is stopping: {error}") from error
        return _result(outcome)

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        """Swap a broken executor for a new one (once, however many requests saw it break)."""
        with self._lock:
            if self._executor is not broken:
                return
            log.error("sidecar: an encoding worker died; starting new workers")
            broken.shutdown(wait=False, cancel_futures=True)
            try:
                fresh = self._new_executor()  # meanwhile, requests meet the broken one: 503
            except Exception:  # workers that cannot start: the next request tries again
                log.exception("sidecar: could not start encoding workers")
                return
            self._executor = fresh
            self.restarts += 1

    def pids(self) -> list[int]:
        """The worker processes' ids (for the CLI's status line and tests)."""
        executor = self._executor
        if executor is None:
            return []
        processes = getattr(executor, "_processes", None) or {}
        return sorted(processes)

    def shutdown(self) -> None:
        """Let the workers finish what they hold, close their files, and wait for them to exit."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
