"""Session marks a read leaves for later prerequisites, written to the counter store once per
value rather than once per read.

A profile, an order or a product lists tens of ids that a later write may name (``SeenIn``);
each is a counter-store mark that expires ``session_ttl`` after its last refresh. Re-reading the
same record re-marks the same values: on the memory store that was most of what a multi-kilobyte
read cost, and on SQLite or Redis each mark is a round trip. ``RecentMarks`` remembers, per
session, when this guard last wrote each mark, and a mark written within ``refresh_after`` of now
is not written again. The store stays the authority (a check reads it, never this cache): a mark
is only ever skipped when this guard itself wrote it moments ago, so a mark outlives its latest
sighting by at least ``session_ttl - refresh_after`` (one minute less at most, of a day by
default). Bounded: the oldest sessions are forgotten first, and a session's own memory is
cleared when it fills; forgetting only costs a write.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from guard.stores.base import CounterStore

__all__ = ["RecentMarks"]


class RecentMarks:
    """When this guard last wrote each session's marks, to skip rewriting the fresh ones.

    Kept per session and key prefix (``value:<session>:<tool>:<path>:``) as the set of suffixes
    written and the time of the oldest of those writes: a re-read whose values are all in the set
    costs one subset test."""

    __slots__ = ("_lock", "_per_session", "_sessions", "_sessions_max")

    def __init__(self, *, sessions: int = 4096, per_session: int = 4096) -> None:
        self._sessions: dict[str, dict[str, tuple[float, set[str]]]] = {}
        self._sessions_max, self._per_session = sessions, per_session
        self._lock = threading.Lock()  # only around adding and dropping sessions

    @staticmethod
    def refresh_after(ttl: float) -> float:
        """Seconds after which a mark is written again: a minute, or 1% of a shorter TTL."""
        return min(60.0, ttl / 100)

    def mark(
        self,
        counters: CounterStore,
        session_id: str,
        prefix: str,
        suffixes: Collection[str],
        *,
        now: float,
        ttl: float,
    ) -> None:
        """Write the mark ``prefix + suffix`` for each suffix this guard did not write within
        ``refresh_after(ttl)``."""
        # Every read of a record comes here: a known session costs a lookup, not a call.
        written = self._sessions.get(session_id)
        if written is None:
            written = self._of(session_id)
        since, done = written.get(prefix, (now, _NONE))
        if since <= now - min(60.0, ttl / 100):  # refresh_after(ttl), inlined for the same reason
            since, done = now, _NONE  # due for a refresh: every mark is written again
        elif done.issuperset(suffixes):
            return
        fresh = set(done)
        for suffix in suffixes:
            if suffix not in fresh:
                counters.add(prefix + suffix, now=now, ttl=ttl)  # admits only: no need to wait
                fresh.add(suffix)  # after the write: one that failed (StoreFull) is not skipped
                written[prefix] = (since, fresh)
        if len(written) > self._per_session:
            written.clear()

    def _of(self, session_id: str) -> dict[str, tuple[float, set[str]]]:
        with self._lock:
            written = self._sessions.setdefault(session_id, {})
            while len(self._sessions) > self._sessions_max:
                del self._sessions[next(iter(self._sessions))]
            return written


_NONE: frozenset[str] = frozenset()
