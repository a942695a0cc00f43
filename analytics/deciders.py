"""Who decided an approval, by name, from the approvals store the guard or gateway used.

A span names the decider only by a keyed hash (``guard.approval.by``): names never leave the
process unmasked. The responder who can read the deployment's approvals store (the SQLite file or
Redis URL of ``callgate approvals --store``) can read the names there, so ``callgate trace --store``
and the Trace explorer show them, labelled with where they came from. With the masking key at hand
(``CALLGATE_MASKING_KEY``) the store's name is checked against the span's hash: a store edited
after the fact, or another deployment's store, shows as a mismatch rather than as a name.

analytics knows the span contract, not the guard's classes, so the store is read here by its
documented layout (the ``approvals`` table's ``id`` and ``decided_by`` columns; the Redis hash
``{prefix}approval:{id}``), read-only: a reader never creates, migrates or locks a store. A test
writes through the guard's stores and reads back through this module, so the two cannot drift.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path

from .reconstruct import CallSummary, TraceView

__all__ = ["StoreUnreadable", "approval_ids", "decider_names", "with_deciders"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
REDIS_PREFIX = "callgate:"
"""The Redis stores' default key prefix (``guard.stores.redis.DEFAULT_PREFIX``)."""
_BATCH = 500
"""Ids per SQLite query, under SQLite's bound on parameters."""


class StoreUnreadable(Exception):
    """The approvals store named cannot be opened or read (one line: what and why)."""


def decider_names(
    store: str, approval_ids: Iterable[str], *, prefix: str = REDIS_PREFIX
) -> dict[str, str]:
    """``approval_id -> decided_by`` for the decided ones among ``approval_ids`` in ``store``.

    ``store`` is a SQLite file (it must exist) or a Redis URL (keys under ``prefix``, the
    stores' default unless the deployment set another). Raises :class:`StoreUnreadable` with one
    line when it cannot be read.
    """
    wanted = sorted(set(approval_ids))
    if not wanted:
        return {}
    if store.startswith(REDIS_SCHEMES):
        return _from_redis(store, wanted, prefix)
    return _from_sqlite(Path(store), wanted)


def with_deciders(
    view: TraceView, names: Mapping[str, str], masking_key: str | None = None
) -> TraceView:
    """``view`` with each resumed call's decider named from ``names`` (:func:`decider_names`)."""
    masker = None
    if masking_key:
        from telemetry.masking import Masker  # the one definition of the pseudonym

        masker = Masker(key=masking_key.encode())

    def named(call: CallSummary) -> CallSummary:
        name = names.get(call.approval_id or "")
        if name is None or not call.resumed:
            return call
        matches = None
        if masker is not None and call.approved_by:
            matches = masker.principal(name) == call.approved_by
        return dataclasses.replace(call, decided_by_name=name, decider_matches_span=matches)

    return dataclasses.replace(
        view,
        calls=tuple(named(c) for c in view.calls),
        approvals=tuple(named(c) for c in view.approvals),
    )


def approval_ids(view: TraceView) -> set[str]:
    """The approval ids a trace view mentions."""
    return {c.approval_id for c in (*view.calls, *view.approvals) if c.approval_id}


def _from_sqlite(path: Path, wanted: list[str]) -> dict[str, str]:
    if not path.is_file():
        raise StoreUnreadable(f"no approvals store at {path}")
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as err:
        raise StoreUnreadable(f"cannot read the approvals store {path}: {err}") from None
    try:
        names: dict[str, str] = {}
        for start in range(0, len(wanted), _BATCH):
            batch = wanted[start : start + _BATCH]
            rows = conn.execute(
                f"SELECT id, decided_by FROM approvals WHERE id IN ({', '.join('?' * len(batch))})"
                " AND decided_by IS NOT NULL",
                batch,
            )
            names.update((str(i), str(by)) for i, by in rows)
        return names
    except sqlite3.Error as err:  # not a database, or not a callgate store
        raise StoreUnreadable(f"{path} is not a callgate approvals store (SQLite): {err}") from None
    finally:
        conn.close()


def _from_redis(url: str, wanted: list[str], prefix: str) -> dict[str, str]:
    try:
        import redis
    except ImportError:
        raise StoreUnreadable(
            "reading a Redis store needs the redis package: pip install 'callgate[redis]'"
        ) from None
    from .urls import without_password

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        pipe = client.pipeline(transaction=False)
        for approval_id in wanted:
            pipe.hget(f"{prefix}approval:{approval_id}", "decided_by")
        replies = pipe.execute()
    except redis.RedisError as err:
        raise StoreUnreadable(
            f"cannot read the approvals store {without_password(url)}: {err}"
        ) from None
    finally:
        client.close()
    return {
        approval_id: by.decode() if isinstance(by, bytes) else str(by)
        for approval_id, by in zip(wanted, replies, strict=True)
        if by
    }
