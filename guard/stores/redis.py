"""Redis stores: shared by every host and process that points at one Redis server.

Needs the optional ``redis`` package (``pip install 'redis>=5'``); ``guard.stores`` does not import
this module, so the rest of the guard works without it.

How the guarantees are kept:

- **Atomic read-decide-write**: every operation that reads before it writes (claims, decisions,
  counters) is one Lua script (``guard.stores._redis_lua``), run by its hash (``EVALSHA``, with
  ``EVAL`` when the server answers ``NOSCRIPT``), so no two hosts can both see a key free and
  take it. Every store operation is one command: one round trip. Two cross the stores, since
  they share the server: ``RedisIdempotencyStore.claim_after`` counts a call's ceilings and then
  claims, and ``RedisApprovalStore.decide_then_claim`` decides and then claims, each claim made
  only when what comes before it lets the call on (``guard.batching``, ``Guard.approve``).
- **Writes nobody waits for**: ``complete``, ``release`` and ``reset`` return nothing, and a
  failure of any of them is safe to learn late (a claim left in flight goes stale and refuses
  repeats; a counter left in place only refuses more), so they are sent without waiting and their
  replies read with the next command of the same thread (``guard.stores._redis_wire``): a guard
  call's last writes ride with the next call's first read.
- **The caller's clock**: deadlines are stored as fields and compared with the ``now`` each call
  passes, exactly as the memory and SQLite stores do; Redis's own clock never decides an answer.
- **Bounded memory**: each key also carries a Redis TTL of its remaining life plus ``grace``
  seconds, so Redis deletes what nobody purges. ``grace`` absorbs disagreement between the
  callers' clock and Redis's; within it the stored deadline decides.
- **purge** scans this store's keys (``SCAN``, in batches) and deletes the expired ones still
  there. It returns only what it deleted itself, so it may return 0 when Redis's expiry already
  did the work; calling it is optional.

One record per key, as a hash:

- ``{prefix}idem:{key}``: fingerprint, result (absent while in flight), claimed_at, expires_at;
- ``{prefix}counter:{key}``: value, expires_at;
- ``{prefix}approval:{id}``: the action's fields; ``{prefix}proposal:{proposal_key}``: a list of
  approval ids in creation order, the index ``find_pending`` walks from the newest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from guard.stores import _redis_lua as lua
from guard.stores._redis_server import refuse_eviction, refuse_volatile
from guard.stores._redis_wire import RedisWire, Script, wire_of
from guard.stores._rules import (
    CLAIMED,
    CONFLICT,
    IN_FLIGHT,
    STALE,
    UNKNOWN_MARK,
    claim_deadline,
    outcome_unknown,
)
from guard.stores.base import (
    PENDING_ACTION_FIELDS,
    ApprovalState,
    ApprovalStore,
    Ceiling,
    Claim,
    ClaimAsk,
    ClaimsAfterCounting,
    ClaimState,
    CounterStore,
    DecidesThenClaims,
    IdempotencyStore,
    KeyRecord,
    PendingAction,
)
from guard.stores.bundle import Stores

try:
    import redis
except ImportError as err:  # pragma: no cover - exercised only without the extra installed
    raise ImportError("guard.stores.redis needs the redis package: pip install 'redis>=5'") from err

__all__ = [
    "RedisApprovalStore",
    "RedisCounterStore",
    "RedisIdempotencyStore",
    "RedisStores",
    "open_redis_stores",
]

DEFAULT_PREFIX = "callgate:"
DEFAULT_GRACE = 3600.0
"""Seconds Redis keeps a key past its deadline: generous, since the stored deadline decides."""

_NEVER = 2**63 - 1
"""The limit of a counter only read: no value is over it."""

_SCAN_BATCH = 500
"""Keys per SCAN step and per purge script call."""

_CLAIM = Script("claim", lua.CLAIM)
_COMPLETE = Script("complete", lua.COMPLETE)
_RELEASE = Script("release", lua.RELEASE)
_DEADLINE_PURGE = Script("deadline_purge", lua.DEADLINE_PURGE)
_INCR = Script("incr", lua.INCR)
_ADD_WITHIN = Script("add_within", lua.ADD_WITHIN)
_RESET = Script("reset", lua.RESET)
_TALLY = Script("tally", lua.TALLY)
_CEILINGS = Script("ceilings", lua.CEILINGS)
_CEILINGS_CLAIM = Script("ceilings_claim", lua.CEILINGS_CLAIM)
_APPROVAL_CREATE = Script("approval_create", lua.APPROVAL_CREATE)
_APPROVAL_DECIDE = Script("approval_decide", lua.APPROVAL_DECIDE)
_APPROVAL_DECIDE_CLAIM = Script("approval_decide_claim", lua.APPROVAL_DECIDE_CLAIM)
_APPROVAL_FIND_PENDING = Script("approval_find_pending", lua.APPROVAL_FIND_PENDING)
_APPROVAL_FILE = Script("approval_file", lua.APPROVAL_FILE)
_APPROVAL_PURGE = Script("approval_purge", lua.APPROVAL_PURGE)


def _text(value: bytes | str) -> str:
    """Replies are bytes unless the client was made with ``decode_responses=True``."""
    return value.decode() if isinstance(value, bytes) else value


_CLAIMS = {
    ClaimState.CLAIMED: CLAIMED,
    ClaimState.IN_FLIGHT: IN_FLIGHT,
    ClaimState.CONFLICT: CONFLICT,
    ClaimState.STALE: STALE,
}


def _ttl_ms(deadline: float, now: float, grace: float) -> int:
    """The Redis TTL for a key whose stored deadline is ``deadline``, at least 1 ms."""
    return max(1, math.ceil((deadline - now + grace) * 1000))


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


class _RedisStore:
    """What each Redis store shares: the client, its key namespace, and the scanning purge."""

    _NAMESPACE = ""

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, grace: float = DEFAULT_GRACE
    ) -> None:
        if grace < 0:
            raise ValueError(f"grace must not be negative, got {grace}")
        self._client = client
        self._wire: RedisWire = wire_of(client)
        self._prefix = prefix
        self._keys = f"{prefix}{self._NAMESPACE}:"
        self._grace = grace

    def _key(self, name: str) -> str:
        return self._keys + name

    def _scan(self) -> Iterator[list[str]]:
        """This store's keys, in batches; keys that appear or vanish meanwhile may be missed."""
        self._wire.settle()  # the scan runs on another connection: what this thread sent first
        batch: list[str] = []
        pattern = _glob_escape(self._keys) + "*"
        for key in self._client.scan_iter(match=pattern, count=_SCAN_BATCH):
            batch.append(_text(key))
            if len(batch) == _SCAN_BATCH:
                yield batch
                batch = []
        if batch:
            yield batch


def _claim(reply: Sequence[bytes | str]) -> Claim:
    """A CLAIM script's reply, {state, result, holder}, as a ``Claim``."""
    state, holder = ClaimState(_text(reply[0])), _text(reply[2])
    if state is ClaimState.COMPLETED:
        return Claim(state=state, result=_text(reply[1]), holder=holder or None)
    if holder:
        return Claim(state=state, holder=holder)
    return _CLAIMS[state]


class RedisIdempotencyStore(_RedisStore):
    """Claims and results as hashes; a claim is one script, atomic across hosts."""

    _NAMESPACE = "idem"

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, grace: float = DEFAULT_GRACE
    ) -> None:
        super().__init__(client, prefix=prefix, grace=grace)

    def claim(
        self,
        key: str,
        fingerprint: str,
        *,
        now: float,
        lease: float,
        take_stale: bool = True,
        lock: str | None = None,
    ) -> Claim:
        ask = ClaimAsk(
            key=key, fingerprint=fingerprint, lease=lease, take_stale=take_stale, lock=lock
        )
        keys, args = self._claim_args(ask, now)
        return _claim(self._wire.run(_CLAIM, keys, args))

    def claim_after(
        self,
        counters: CounterStore,
        ceilings: Sequence[Ceiling],
        ask: ClaimAsk,
        *,
        now: float,
    ) -> tuple[list[int], Claim | None]:
        """Count ``ceilings`` and, if none is over its limit, claim: one script, one round trip,
        when ``counters`` is a Redis counter store on this store's connection; two steps else."""
        if not isinstance(counters, RedisCounterStore) or counters._wire is not self._wire:
            values = counters.ceilings(ceilings, now=now)
            if len(values) < len(ceilings) or (ceilings and values[-1] > ceilings[-1].limit):
                return values, None
            return values, ask.claim_on(self, now=now)
        counted, counting = counters._ceiling_args(ceilings, now)
        claimed, claiming = self._claim_args(ask, now)
        args = [len(counted), *counting, *claiming]
        values, reply = self._wire.run(_CEILINGS_CLAIM, [*counted, *claimed], args)
        return [int(value) for value in values], _claim(reply) if reply else None

    def _claim_args(self, ask: ClaimAsk, now: float) -> tuple[list[str], list[str | int]]:
        """The CLAIM script's keys and arguments for ``ask`` at ``now``."""
        expires_at = claim_deadline(now=now, lease=ask.lease)
        ttl_ms = _ttl_ms(expires_at, now, self._grace)
        keys = [self._key(ask.key)]
        if ask.lock is not None:
            keys.append(self._key(ask.lock))
        args: list[str | int] = [ask.fingerprint, repr(now), repr(ask.lease), repr(expires_at)]
        return keys, [*args, ttl_ms, int(ask.take_stale), ask.key]

    def complete(self, key: str, fingerprint: str, result: str, *, now: float, ttl: float) -> None:
        expires_at = now + ttl
        ttl_ms = _ttl_ms(expires_at, now, self._grace)
        args: list[str | int] = [fingerprint, result, repr(now), repr(expires_at), ttl_ms, key]
        # Sent, not awaited: should recording fail, the claim stays in flight and goes stale, so a
        # repeat is refused (IN_PROGRESS, then an unknown outcome), never run a second time.
        self._wire.send(_COMPLETE, [self._key(key)], args)

    def release(self, key: str) -> None:
        # Sent, not awaited: a release that fails leaves the claim to go stale, as above.
        self._wire.send(_RELEASE, [self._key(key)], [key])

    def purge(self, now: float) -> int:
        """Delete expired entries Redis has not expired itself; returns how many (may be 0)."""
        purge = self._wire.run
        return sum(int(purge(_DEADLINE_PURGE, batch, [repr(now)])) for batch in self._scan())

    def record(self, key: str) -> KeyRecord | None:
        return self._key_record(key, self._wire.command("HMGET", self._key(key), *_RECORD_FIELDS))

    def unknown(self, *, now: float) -> list[KeyRecord]:
        # A SCAN of this store's keys, not an index set: keys end by Redis's own expiry, which no
        # script sees, so a set would keep naming keys long gone, and every claim and complete
        # would pay to maintain it. Listing unknowns is an operator's occasional command.
        found: list[KeyRecord] = []
        for batch in self._scan():
            pipe = self._client.pipeline(transaction=False)
            for name in batch:
                pipe.hmget(name, _RECORD_FIELDS)
            for name, values in zip(batch, pipe.execute(), strict=True):
                record = self._key_record(name[len(self._keys) :], values)
                if (
                    record is not None
                    and record.result is not None
                    and UNKNOWN_MARK in record.result
                    and not record.expires_at < now
                    and outcome_unknown(record.result)
                ):
                    found.append(record)
        return found

    @staticmethod
    def _key_record(key: str, values: Sequence[bytes | str | None]) -> KeyRecord | None:
        fingerprint, result, claimed_at, expires_at, holder = values
        if fingerprint is None or expires_at is None:
            return None  # gone meanwhile, or not a record of this store
        return KeyRecord(
            key=key,
            fingerprint=_text(fingerprint),
            result=None if result is None else _text(result),
            claimed_at=float(_text(claimed_at)) if claimed_at is not None else 0.0,
            expires_at=float(_text(expires_at)),
            holder=None if holder is None else _text(holder),
        )


_RECORD_FIELDS = ["fingerprint", "result", "claimed_at", "expires_at", "holder"]


# Field order for the hash; None-valued optional fields are left out.
_APPROVAL_FIELDS = PENDING_ACTION_FIELDS
_FLOAT_FIELDS = frozenset({"created_at", "expires_at", "decided_at"})


def _approval_fields(action: PendingAction) -> list[str]:
    """The action as a flat field/value list, floats in ``repr`` so they read back exactly."""
    flat: list[str] = []
    for name in _APPROVAL_FIELDS:
        value = getattr(action, name)
        if value is None:
            continue
        if name in ("scopes", "sensitive"):
            value = json.dumps(list(value))
        elif name == "authenticated":
            value = "1" if value else "0"
        elif name == "state":
            value = value.value
        elif name in _FLOAT_FIELDS:
            value = repr(float(value))
        flat += [name, value]
    return flat


def _approval(fields: dict[str, str]) -> PendingAction:
    # Fields added after the first release are absent from older hashes: their defaults apply
    # (no seal, so such an action never runs).
    values: dict[str, Any] = {name: fields[name] for name in _APPROVAL_FIELDS if name in fields}
    values.setdefault("call_id", None)
    values["scopes"] = tuple(json.loads(fields["scopes"]))
    values["sensitive"] = tuple(json.loads(fields.get("sensitive", "[]")))
    values["authenticated"] = fields.get("authenticated", "1") == "1"
    values["state"] = ApprovalState(fields["state"])
    for name in _FLOAT_FIELDS:
        if values.get(name) is not None:
            values[name] = float(values[name])
    return PendingAction(**values)


def _fields(reply: dict[Any, Any] | Sequence[bytes | str]) -> dict[str, str]:
    """An ``HGETALL`` reply (a flat list in RESP2, a map in RESP3) as a dict of text."""
    if isinstance(reply, dict):
        return {_text(k): _text(v) for k, v in reply.items()}
    return _from_pairs(reply)


def _from_pairs(reply: Sequence[bytes | str]) -> dict[str, str]:
    """A script's ``HGETALL`` reply (a flat list) as a dict."""
    items = [_text(item) for item in reply]
    return dict(zip(items[::2], items[1::2], strict=True))


class RedisApprovalStore(_RedisStore):
    """Pending actions as hashes, indexed by proposal key; decided ones kept for ``retention`` s."""

    _NAMESPACE = "approval"

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        retention: float = 86_400.0,
        grace: float = DEFAULT_GRACE,
    ) -> None:
        super().__init__(client, prefix=prefix, grace=grace)
        self._retention = retention
        self._index = f"{prefix}proposal:"

    def create(self, action: PendingAction) -> None:
        keys = [self._key(action.id), self._index + action.proposal_key]
        args = [action.id, repr(action.created_at), repr(self._retention), repr(self._grace)]
        if not self._wire.run(_APPROVAL_CREATE, keys, [*args, *_approval_fields(action)]):
            raise ValueError(f"approval id {action.id!r} already exists")

    def get(self, approval_id: str) -> PendingAction | None:
        fields = self._wire.command("HGETALL", self._key(approval_id))
        if not fields:
            return None
        return _approval(_fields(fields))

    def ids(self) -> list[str]:
        start = len(self._keys)
        return [key[start:] for batch in self._scan() for key in batch]

    def find_pending(self, proposal_key: str, *, now: float) -> PendingAction | None:
        keys, args = [self._index + proposal_key], [repr(now), self._keys]
        reply = self._wire.run(_APPROVAL_FIND_PENDING, keys, args)
        return None if reply is None else _approval(_from_pairs(reply))

    def file(self, action: PendingAction, *, now: float) -> PendingAction:
        keys = [self._key(action.id), self._index + action.proposal_key]
        args = [repr(now), self._keys, action.id, repr(action.created_at), repr(self._retention)]
        reply = self._wire.run(
            _APPROVAL_FILE, keys, [*args, repr(self._grace), *_approval_fields(action)]
        )
        if reply == 0:
            raise ValueError(f"approval id {action.id!r} already exists")
        return _approval(_from_pairs(reply)) if reply else action

    def filed(self, proposal_key: str) -> list[PendingAction]:
        ids = self._wire.command("LRANGE", self._index + proposal_key, 0, -1)
        found = []
        for approval_id in ids:
            fields = self._wire.command("HGETALL", self._key(_text(approval_id)))
            if fields:  # Redis may have expired the action before its index entry
                found.append(_approval(_fields(fields)))
        return found

    def decide(
        self, approval_id: str, *, approve: bool, by: str, now: float
    ) -> PendingAction | None:
        args = self._decide_args(approve, by, now)
        reply = self._wire.run(_APPROVAL_DECIDE, [self._key(approval_id)], args)
        return None if reply is None else _approval(_from_pairs(reply))

    def decide_then_claim(
        self,
        approval_id: str,
        *,
        approve: bool,
        by: str,
        now: float,
        idempotency: IdempotencyStore,
        ask: ClaimAsk,
    ) -> tuple[PendingAction | None, Claim | None]:
        """Decide and, if the action stands approved, claim: one script, one round trip, when
        ``idempotency`` is a Redis store on this store's connection; two steps else."""
        if (
            not isinstance(idempotency, RedisIdempotencyStore)
            or idempotency._wire is not self._wire
        ):
            action = self.decide(approval_id, approve=approve, by=by, now=now)
            if action is None or action.state is not ApprovalState.APPROVED:
                return action, None
            return action, ask.claim_on(idempotency, now=now)
        claimed, claiming = idempotency._claim_args(ask, now)
        keys = [self._key(approval_id), *claimed]
        reply = self._wire.run(
            _APPROVAL_DECIDE_CLAIM, keys, [*self._decide_args(approve, by, now), *claiming]
        )
        if reply is None:
            return None, None
        fields, claim = reply
        return _approval(_from_pairs(fields)), _claim(claim) if claim else None

    def _decide_args(self, approve: bool, by: str, now: float) -> list[str]:
        """The decision's arguments, as the DECIDE script reads them."""
        retention, grace = repr(self._retention), repr(self._grace)
        return ["1" if approve else "0", by, repr(now), retention, self._index, grace]

    def purge(self, now: float) -> int:
        """Delete actions past retention that Redis has not expired itself (may return 0)."""
        args = [repr(now), repr(self._retention), self._index]
        return sum(int(self._wire.run(_APPROVAL_PURGE, batch, args)) for batch in self._scan())


class RedisCounterStore(_RedisStore):
    """Counters as hashes; every update is one script, so no increment is lost across hosts."""

    _NAMESPACE = "counter"
    batches = True

    def __init__(
        self, client: redis.Redis, *, prefix: str = DEFAULT_PREFIX, grace: float = DEFAULT_GRACE
    ) -> None:
        super().__init__(client, prefix=prefix, grace=grace)

    def admits(self, key: str, *, now: float) -> bool:
        """Always: the server must be set not to evict (``open_redis_stores`` checks), and at its
        ``maxmemory`` it refuses the write, which fails the call closed."""
        return True

    def incr(self, key: str, amount: int = 1, *, now: float, ttl: float) -> int:
        expires_at = now + ttl
        ttl_ms = _ttl_ms(expires_at, now, self._grace)
        args: list[str | int] = [amount, repr(now), repr(expires_at), ttl_ms]
        return int(self._wire.run(_INCR, [self._key(key)], args))

    def add(self, key: str, amount: int = 1, *, now: float, ttl: float) -> None:
        expires_at = now + ttl
        ttl_ms = _ttl_ms(expires_at, now, self._grace)
        self._wire.send(_INCR, [self._key(key)], [amount, repr(now), repr(expires_at), ttl_ms])

    def tally(
        self, incrs: Sequence[tuple[str, float]], *, now: float, reads: Sequence[str] = ()
    ) -> list[int]:
        keys = [self._key(key) for key, _ in incrs] + [self._key(key) for key in reads]
        args: list[str | int] = [len(incrs), repr(now)]
        for _, ttl in incrs:
            expires_at = now + ttl
            args += [1, repr(expires_at), _ttl_ms(expires_at, now, self._grace)]
        return [int(value) for value in self._wire.run(_TALLY, keys, args)]

    def ceilings(self, ceilings: Sequence[Ceiling], *, now: float) -> list[int]:
        keys, args = self._ceiling_args(ceilings, now)
        return [int(value) for value in self._wire.run(_CEILINGS, keys, args)]

    def _ceiling_args(
        self, ceilings: Sequence[Ceiling], now: float
    ) -> tuple[list[str], list[str | int]]:
        """The CEILINGS script's keys and arguments for ``ceilings`` at ``now``."""
        keys = [self._key(ceiling.key) for ceiling in ceilings]
        args: list[str | int] = [repr(now)]
        for ceiling in ceilings:
            if ceiling.ttl is None:
                args += [ceiling.limit, "", 0]
            else:
                expires_at = now + ceiling.ttl
                args += [ceiling.limit, repr(expires_at), _ttl_ms(expires_at, now, self._grace)]
        return keys, args

    def ahead(self, keys: Sequence[str], *, now: float) -> dict[str, int]:
        found: dict[str, int] = {}

        def fill(reply: list[bytes | str]) -> None:
            found.update(zip(keys, (int(value) for value in reply), strict=True))

        args: list[str | int] = [repr(now)]
        for _ in keys:
            args += [_NEVER, "", 0]
        # Sent, not awaited: the reply arrives with the next command (the claim), filling found.
        self._wire.send(_CEILINGS, [self._key(key) for key in keys], args, on_reply=fill)
        return found

    def get(self, key: str, *, now: float) -> int:
        value, expires_at = self._wire.command("HMGET", self._key(key), "value", "expires_at")
        if value is None or expires_at is None or float(_text(expires_at)) < now:
            return 0
        return int(_text(value))

    def reset(self, key: str) -> None:
        # Sent, not awaited: a counter left in place only refuses more (a streak, a count).
        self._wire.send(_RESET, [self._key(key)], [])

    def add_within(self, key: str, amount: int, limit: int, *, now: float, ttl: float) -> bool:
        expires_at = now + ttl
        ttl_ms = _ttl_ms(expires_at, now, self._grace)
        args: list[str | int] = [amount, limit, repr(now), repr(expires_at), ttl_ms]
        return int(self._wire.run(_ADD_WITHIN, [self._key(key)], args)) == 1

    def purge(self, now: float) -> int:
        """Delete expired counters Redis has not expired itself; returns how many (may be 0)."""
        purge = self._wire.run
        return sum(int(purge(_DEADLINE_PURGE, batch, [repr(now)])) for batch in self._scan())


@dataclass(frozen=True, kw_only=True, slots=True)
class RedisStores(Stores):
    """The three Redis stores on one client; ``close`` closes the client only if it was opened here."""

    client: redis.Redis
    owns_client: bool
    """True when ``open_redis_stores`` made the client from a URL, so closing it is ours to do."""

    def close(self) -> None:
        """Wait for this thread's unawaited writes, close the stores' own connections, and the
        client with its pool if this object opened it."""
        try:
            wire_of(self.client).close()
        finally:
            if self.owns_client:
                self.client.close()


def open_redis_stores(
    url_or_client: str | redis.Redis,
    *,
    prefix: str = DEFAULT_PREFIX,
    retention: float = 86_400.0,
    grace: float = DEFAULT_GRACE,
    allow_eviction: bool = False,
    allow_volatile: bool = False,
) -> RedisStores:
    """The idempotency, approval and counter stores on one Redis, their keys under ``prefix``.

    Pass a ``redis://`` URL (the stores then own the client and ``close`` closes it) or a
    ``redis.Redis`` client the host manages. ``retention`` is how long decided or expired
    approvals are kept; ``grace`` how long Redis keeps any key past its stored deadline.

    A server whose ``maxmemory-policy`` evicts keys is refused (``ConfigurationError``): every key
    here has a TTL, so even the ``volatile-*`` policies would drop taint marks, limits, claims and
    approvals under memory pressure from other sessions. Set ``noeviction`` (at ``maxmemory`` the
    server then refuses writes and calls fail closed), or pass ``allow_eviction=True`` knowingly.

    A server with neither append-only file nor RDB snapshots (``appendonly no`` and ``save ""``) is
    refused too: a restart would forget every idempotency key (a repeated write would run again),
    every approval and every limit. Turn on ``appendonly yes`` (``appendfsync always`` keeps every
    acknowledged write), or pass ``allow_volatile=True`` for tests and throwaway caches.
    """
    owns_client = isinstance(url_or_client, str)
    client = (
        redis.Redis.from_url(url_or_client) if isinstance(url_or_client, str) else url_or_client
    )
    try:
        if not allow_eviction:
            refuse_eviction(client)
        if not allow_volatile:
            refuse_volatile(client)
        return RedisStores(
            idempotency=RedisIdempotencyStore(client, prefix=prefix, grace=grace),
            approvals=RedisApprovalStore(client, prefix=prefix, retention=retention, grace=grace),
            counters=RedisCounterStore(client, prefix=prefix, grace=grace),
            client=client,
            owns_client=owns_client,
        )
    except BaseException:
        if owns_client:
            client.close()
        raise


if TYPE_CHECKING:
    # Protocols are structural: these lines make mypy prove each class still fits its protocol.
    _idempotency: type[IdempotencyStore] = RedisIdempotencyStore
    _approvals: type[ApprovalStore] = RedisApprovalStore
    _counters: type[CounterStore] = RedisCounterStore
    _claims_after: type[ClaimsAfterCounting] = RedisIdempotencyStore
    _decides_then_claims: type[DecidesThenClaims] = RedisApprovalStore
