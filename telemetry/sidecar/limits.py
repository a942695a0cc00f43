"""The sidecar's bounds: bytes in flight, inflated size, header values; and the refusals.

Everything here is small and pure so the HTTP and gRPC endpoints share one definition of each
limit: a ``ByteBudget`` both endpoints reserve from before they hold a body, ``inflate`` that never
makes more than its cap (a 1 MiB gzip bomb stops at the cap, not at 2 GB), strict parsing of
``Content-Length``. Who may bind where and the bearer token are ``telemetry.auth``'s.

The refusals every transport answers in its own protocol::

    Unavailable           503 + Retry-After / UNAVAILABLE (exporters retry)
    +-- WriteFailed       the span files could not take the line (disk full)
    ValueError            400 / INVALID_ARGUMENT (malformed)
    +-- BodyTooLarge      413 / RESOURCE_EXHAUSTED
"""

from __future__ import annotations

import threading
import time
import zlib

__all__ = [
    "DECODE_FACTOR",
    "MAX_BODY",
    "MAX_INFLIGHT",
    "BodyTooLarge",
    "ByteBudget",
    "Unavailable",
    "WriteFailed",
    "inflate",
    "parse_content_length",
]

_CHUNK = 64 * 1024
DECODE_FACTOR = 32
"""Bytes of memory decoding may take per byte of body, at worst (upb arena; json.loads objects)."""
MAX_BODY = 4 * 1024 * 1024
"""Default cap on one request body, on the wire and inflated (the Collector's gRPC default)."""
MAX_INFLIGHT = 256 * 1024 * 1024
"""Default cap on the bytes all requests in flight hold together, decoding included."""


class Unavailable(Exception):
    """The request is fine but cannot be taken now (byte budget full, span files not writable):
    answered with HTTP 503 + Retry-After or gRPC UNAVAILABLE, which OTLP exporters retry."""


class WriteFailed(Unavailable):
    """A request's line could not be written (disk full, I/O error): 503 / UNAVAILABLE."""


class BodyTooLarge(ValueError):
    """A body (on the wire or inflated) is over its cap: answered with 413 / RESOURCE_EXHAUSTED."""


class ByteBudget:
    """A count of bytes held by requests in flight, never above ``limit``.

    ``reserve`` waits up to ``timeout`` seconds for room and says whether it got it; the caller
    answers "try later" (HTTP 503, gRPC UNAVAILABLE: both retryable for OTLP exporters) when not.
    A single reservation larger than the whole budget is refused at once (``BodyTooLarge``: 413).

    Decoding is reserved too: ``DECODE_FACTOR`` times the decoded body, the worst case measured
    for upb (a body of empty sub-messages: 32 bytes of arena per 2 bytes of wire) and for
    ``json.loads`` (25x).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._cond = threading.Condition()

    def reserve(self, size: int, timeout: float = 1.0) -> bool:
        """Take ``size`` bytes; ``False`` when they are not free within ``timeout`` s.

        Raises ``BodyTooLarge`` when ``size`` is more than the whole budget (waiting cannot help).
        """
        if size <= 0:
            return True
        if size > self.limit:
            raise BodyTooLarge(f"{size} bytes is more than the {self.limit}-byte in-flight budget")
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.used + size > self.limit:
                left = deadline - time.monotonic()
                if (left <= 0 or not self._cond.wait(left)) and self.used + size > self.limit:
                    return False
            self.used += size
            self.peak = max(self.peak, self.used)
            return True

    def release(self, size: int) -> None:
        if size <= 0:
            return
        with self._cond:
            self.used -= size
            self._cond.notify_all()


def parse_content_length(values: list[str]) -> int | None:
    """The length the ``Content-Length`` header(s) state, ``None`` when absent.

    Raises ``ValueError`` for anything but one run of ASCII digits (``-1``, ``+5``, ``0x10``,
    ``1e3``, empty, or several headers that disagree): such a request is answered with 400.
    """
    if not values:
        return None
    lengths = set()
    for value in values:
        for part in value.split(","):
            text = part.strip(" \t")
            if not text or not text.isascii() or not text.isdigit() or len(text) > 18:
                raise ValueError(f"malformed Content-Length {value!r}")
            lengths.add(int(text))
    if len(lengths) != 1:
        raise ValueError("conflicting Content-Length headers")
    return lengths.pop()


def inflate(body: bytes, encoding: str, cap: int, budget: ByteBudget | None = None) -> bytes:
    """``body`` decoded from ``gzip``/``deflate`` (or as is), never more than ``cap`` bytes of output.

    Inflates in 64 KiB steps and stops as soon as the output passes ``cap`` (``BodyTooLarge``), so a
    compression bomb costs at most ``cap`` bytes. Each step's output is reserved from ``budget``
    first; the caller releases ``len(result)`` when done (a failure releases what was reserved).
    Several gzip members in a row are inflated in turn, like ``gzip.decompress``. Raises
    ``ValueError`` for an unknown encoding or a corrupt stream.
    """
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise ValueError(f"unsupported content encoding {encoding!r}")
    # 47: zlib or gzip header, detected; raw deflate (no header) is tried when neither fits.
    wbits = 47 if encoding != "deflate" or body[:1] == b"\x78" else -15
    out: list[bytes] = []
    size = 0
    reserved = 0
    try:
        data = body
        while True:
            inflater = zlib.decompressobj(wbits)
            pending = data
            while not inflater.eof:
                piece = inflater.decompress(pending, _CHUNK)
                pending = inflater.unconsumed_tail
                if not piece and not pending:
                    break
                size += len(piece)
                if size > cap:
                    raise BodyTooLarge(f"body inflates to more than {cap} bytes")
                if budget is not None and piece:
                    if not budget.reserve(len(piece)):
                        raise Unavailable("busy: too many bytes in flight")
                    reserved += len(piece)
                out.append(piece)
            if not inflater.eof:
                raise ValueError("truncated compressed body")
            data = inflater.unused_data
            if not data or wbits == -15:
                break
        return b"".join(out)
    except zlib.error as error:
        if budget is not None:
            budget.release(reserved)
        raise ValueError(f"corrupt compressed body: {error}") from error
    except BaseException:
        if budget is not None:
            budget.release(reserved)
        raise
