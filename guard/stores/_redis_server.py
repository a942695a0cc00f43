"""What ``open_redis_stores`` asks of the server before trusting it with security state.

Each check reads the setting with ``CONFIG GET``; a server that renames or disables ``CONFIG``
(managed services) cannot be asked, and is taken as configured by whoever runs it.
"""

from __future__ import annotations

import redis

from guard.errors import ConfigurationError

__all__ = ["refuse_eviction", "refuse_volatile"]


def _setting(client: redis.Redis, name: str) -> str | None:
    """A server setting as text; None where ``CONFIG`` is renamed or disabled."""
    try:
        reply = client.config_get(name)
    except redis.ResponseError:
        return None
    if not reply:
        return None
    value = next(iter(reply.values()))
    return value.decode() if isinstance(value, bytes) else str(value)


def refuse_volatile(client: redis.Redis) -> None:
    """``ConfigurationError`` for a server with neither an append-only file nor RDB snapshots."""
    appendonly, save = _setting(client, "appendonly"), _setting(client, "save")
    if appendonly is None or save is None:
        return
    if appendonly.lower() in ("no", "0") and not save.strip():
        raise ConfigurationError(
            "Redis keeps nothing across a restart (appendonly no, save ''): a restart would "
            "forget the guard's idempotency keys (a repeated write would run again), approvals "
            "and limits. Set 'appendonly yes' (with 'appendfsync always' to keep every "
            "acknowledged write) or a 'save' schedule, or pass allow_volatile=True to "
            "open_redis_stores."
        )


def refuse_eviction(client: redis.Redis) -> None:
    """``ConfigurationError`` for a server whose ``maxmemory-policy`` may evict keys."""
    policy = _setting(client, "maxmemory-policy") or "noeviction"
    if policy != "noeviction":
        raise ConfigurationError(
            f"Redis maxmemory-policy is {policy!r}: it may evict the guard's security state "
            "(taint marks, limits, claims, approvals). Set it to 'noeviction', or pass "
            "allow_eviction=True to open_redis_stores."
        )
