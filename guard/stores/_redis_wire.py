"""How the Redis stores talk to the server: one connection per thread, scripts by hash, and writes
whose answer nobody waits for sent without waiting.

redis-py's own path (a pool checkout, a command object, response callbacks, ``Script`` objects)
costs more client CPU than the server spends on a script; here a thread keeps one connection of
the client's pool configuration, and a command is packed and sent directly:

- ``run`` sends ``EVAL`` with the body the first time (which loads the script), ``EVALSHA`` with
  its hash after, and waits for the reply; a ``NOSCRIPT`` answer (a restarted or flushed server
  forgot the script) is followed by ``EVAL`` again.
- ``send`` is for a write whose failure is safe to learn late (a result recorded, a claim let go,
  a mark that only ever lets more calls through when present): it goes out as ``EVAL`` (never
  ``NOSCRIPT``, so it cannot fail for a reason a resend would fix) and its reply is read with the
  next command's on the same connection. Commands of one thread therefore reach the server in the
  order they were made, and one guard call pays one wait for a write and the next read together.
  A late error is logged, not raised into an unrelated call.
- Before a connection idle since its last reply is used, a zero-timeout poll sees whether the
  server closed it (a restart): then it reconnects before anything is sent, so nothing is sent
  twice and no call fails for a restart that happened while it was idle.

A connection belongs to a thread and a process: a forked child opens its own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import redis

__all__ = ["RedisWire", "Script", "wire_of"]

log = logging.getLogger("guard")

Arg = str | int | float | bytes


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script as the server knows it: its body and the SHA-1 hash ``EVALSHA`` names."""

    name: str
    """What the log calls it when its reply, read late, is an error."""
    body: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.body.encode()).hexdigest())


class _Connection(Protocol):
    """What the wire uses of a redis-py connection (whose own methods are untyped)."""

    _sock: Any

    def pack_command(self, *args: Arg) -> list[bytes]: ...

    def send_packed_command(self, command: list[bytes], check_health: bool = True) -> None: ...

    def read_response(self) -> Any: ...

    def can_read(self, timeout: float = 0) -> bool: ...

    def disconnect(self) -> None: ...


class _Link:
    """One thread's connection and how many replies it still owes the caller."""

    __slots__ = ("__weakref__", "conn", "owed", "pid")

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.owed: list[tuple[str, Callable[[Any], None] | None]] = []
        """The script each reply not yet read answers, for the log, and who wants the reply."""
        self.pid = os.getpid()


class RedisWire:
    """The commands of every Redis store on one client, one connection per thread."""

    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._local = threading.local()
        self._links: weakref.WeakSet[_Link] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._loaded: set[str] = set()
        """Hashes of scripts this wire ran: the server knows them unless it restarted since."""

    def run(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run ``script`` and return its reply: one round trip, with any owed replies."""
        link = self._link()
        try:
            known = script.sha in self._loaded
            if known:
                reply = self._exchange(link, ("EVALSHA", script.sha, len(keys), *keys, *args))
                known = not isinstance(reply, redis.exceptions.NoScriptError)
            if not known:  # never run here, or the server forgot it: nothing ran, run the body
                reply = self._exchange(link, ("EVAL", script.body, len(keys), *keys, *args))
                self._loaded.add(script.sha)  # EVAL loaded it: the hash will do from now on
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop(link)
            raise
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def command(self, *args: Arg) -> Any:
        """Run one plain command (``HMGET``, ``HGETALL``, ``LRANGE``, ``DEL``) and return its reply."""
        link = self._link()
        try:
            reply = self._exchange(link, args)
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop(link)
            raise
        if isinstance(reply, redis.ResponseError):
            raise reply
        return reply

    def send(
        self,
        script: Script,
        keys: Sequence[str],
        args: Sequence[Arg],
        on_reply: Callable[[Any], None] | None = None,
    ) -> None:
        """Send ``script`` without waiting: its reply is read with the next command's (and handed
        to ``on_reply``, if given and not an error)."""
        link = self._link()
        try:
            packed = link.conn.pack_command("EVAL", script.body, len(keys), *keys, *args)
            link.conn.send_packed_command(packed, check_health=False)
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop(link)
            raise
        link.owed.append((script.name, on_reply))

    def settle(self) -> None:
        """Read every reply this thread's connection owes, so what was sent is applied."""
        link = getattr(self._local, "link", None)
        if link is None or link.pid != os.getpid() or not link.owed:
            return
        try:
            self._read_owed(link)
        except (redis.ConnectionError, redis.TimeoutError):
            self._drop(link)
            raise

    def close(self) -> None:
        """Settle this thread's sends, then close every connection this wire opened."""
        try:
            self.settle()
        finally:
            with self._lock:
                links = list(self._links)
            for link in links:
                if link.pid == os.getpid():
                    link.conn.disconnect()
            self._local = threading.local()

    # -- one thread's connection ------------------------------------------------------------------

    def _link(self) -> _Link:
        link: _Link | None = getattr(self._local, "link", None)
        if link is None or link.pid != os.getpid():
            # From the pool, so closing the client closes it; it stays checked out while the
            # thread lives (replies owed on it must not reach another caller), and goes back,
            # closed, when the thread's link is dropped.
            conn = cast(_Connection, self._pool.get_connection())
            link = _Link(conn)
            weakref.finalize(link, _retire, self._pool, conn)
            with self._lock:
                self._links.add(link)
            self._local.link = link
        elif not link.owed and _closed_by_server(link.conn):
            link.conn.disconnect()  # reconnects on send: nothing of this call was sent yet
        return link

    def _exchange(self, link: _Link, args: Sequence[Arg]) -> Any:
        """Send one command, then read the owed replies and its own; errors come back as values."""
        conn = link.conn
        conn.send_packed_command(conn.pack_command(*args), check_health=False)
        if link.owed:
            self._read_owed(link)
        try:
            return conn.read_response()
        except redis.ResponseError as error:
            return error

    @staticmethod
    def _read_owed(link: _Link) -> None:
        while link.owed:
            what, on_reply = link.owed.pop(0)
            try:
                reply = link.conn.read_response()
                if on_reply is not None:
                    on_reply(reply)
            except redis.ResponseError as error:
                # Only writes whose failure is safe are sent unawaited (see the module docstring):
                # the call that made it has returned, so the log is where it can be seen.
                log.error("a Redis command sent earlier failed (%s): %s", what, error)

    def _drop(self, link: _Link) -> None:
        """A connection that failed mid-exchange: its owed replies are lost with it."""
        if link.owed:
            log.error("Redis connection lost with %d unconfirmed writes", len(link.owed))
        link.owed.clear()
        link.conn.disconnect()


def _retire(pool: redis.ConnectionPool, conn: _Connection) -> None:
    """A link's thread ended or its wire was dropped: close its connection, hand it back."""
    conn.disconnect()
    pool.release(conn)  # type: ignore[arg-type]  # the pool's own connection, seen through _Connection


def _closed_by_server(conn: _Connection) -> bool:
    """Whether an idle connection was closed by the server (or has unexpected data)."""
    if getattr(conn, "_sock", None) is None:
        return False
    try:
        return bool(conn.can_read(timeout=0))
    except (redis.ConnectionError, OSError):
        return True


_WIRES: weakref.WeakKeyDictionary[redis.Redis, RedisWire] = weakref.WeakKeyDictionary()
_WIRES_LOCK = threading.Lock()


def wire_of(client: redis.Redis) -> RedisWire:
    """The one wire of ``client``: every store on a client shares it, so one thread's commands to
    the three stores keep their order and an unawaited write rides with the next command."""
    with _WIRES_LOCK:
        wire = _WIRES.get(client)
        if wire is None:
            wire = _WIRES[client] = RedisWire(client)
        return wire
