"""Definition pinning: the hash of each tool's definition as first seen, kept in the store.

A tool whose upstream definition (description, input and output schema, annotations) no longer
hashes to its pin has changed under the gateway's feet (a "rug pull": the description an operator
reviewed now tells the model something else). The gateway blocks it with TOOL_DEFINITION_CHANGED
until an operator re-pins it with ``callgate gateway pin``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "MemoryPinStore",
    "Pin",
    "PinStore",
    "RedisPinStore",
    "SQLitePinStore",
    "Verdict",
    "definition_hash",
    "instructions",
    "open_pin_store",
    "owner_pin",
    "pin_diff",
    "review",
]


def definition_hash(definition: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of every field the model or the policy reads."""
    pinned = {
        key: definition.get(key)
        for key in ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
    }
    text = json.dumps(pinned, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class Pin:
    """One pinned definition."""

    tool: str
    """``upstream/tool``: the upstream's name and the tool's own name there."""
    hash: str
    definition: str
    """The pinned definition, JSON: what an operator compares a changed one against."""
    pinned_at: float
    pinned_by: str


class PinStore(Protocol):
    """Pins by tool."""

    def get(self, tool: str) -> Pin | None:
        """The pin, or None when the tool was never seen."""

    def put(self, pin: Pin) -> None:
        """Pin (or re-pin) a tool."""

    def add(self, pin: Pin) -> Pin:
        """Pin a tool seen for the first time; returns the pin that stands (an earlier one wins)."""


class MemoryPinStore:
    """Pins in a dict: one process, gone on restart."""

    def __init__(self) -> None:
        self._pins: dict[str, Pin] = {}
        self._lock = threading.Lock()

    def get(self, tool: str) -> Pin | None:
        return self._pins.get(tool)

    def put(self, pin: Pin) -> None:
        self._pins[pin.tool] = pin

    def add(self, pin: Pin) -> Pin:
        with self._lock:
            return self._pins.setdefault(pin.tool, pin)


_PINS_DDL = """
CREATE TABLE IF NOT EXISTS gateway_pins (
    tool       TEXT PRIMARY KEY,   -- upstream/tool
    hash       TEXT NOT NULL,      -- sha256 of the canonical definition
    definition TEXT NOT NULL,      -- the pinned definition, JSON
    pinned_at  REAL NOT NULL,
    pinned_by  TEXT NOT NULL
)
"""


class SQLitePinStore:
    """Pins in the ``gateway_pins`` table of the gateway's SQLite store file."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = threading.local()
        with self._conn() as conn:
            conn.execute(_PINS_DDL)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=5.0, isolation_level=None)
            self._local.conn = conn
        return conn

    def get(self, tool: str) -> Pin | None:
        row = (
            self._conn()
            .execute(
                "SELECT tool, hash, definition, pinned_at, pinned_by FROM gateway_pins WHERE tool = ?",
                (tool,),
            )
            .fetchone()
        )
        return (
            None
            if row is None
            else Pin(
                tool=row[0], hash=row[1], definition=row[2], pinned_at=row[3], pinned_by=row[4]
            )
        )

    def put(self, pin: Pin) -> None:
        self._conn().execute(
            "INSERT OR REPLACE INTO gateway_pins VALUES (?, ?, ?, ?, ?)",
            (pin.tool, pin.hash, pin.definition, pin.pinned_at, pin.pinned_by),
        )

    def add(self, pin: Pin) -> Pin:
        self._conn().execute(
            "INSERT OR IGNORE INTO gateway_pins VALUES (?, ?, ?, ?, ?)",
            (pin.tool, pin.hash, pin.definition, pin.pinned_at, pin.pinned_by),
        )
        stored = self.get(pin.tool)
        assert stored is not None
        return stored


class RedisPinStore:
    """Pins as hashes ``{prefix}pin:{tool}`` on the gateway's Redis."""

    def __init__(self, client: Any, prefix: str = "callgate:") -> None:
        self._client = client
        self._prefix = prefix + "pin:"

    def get(self, tool: str) -> Pin | None:
        fields = self._client.hgetall(self._prefix + tool)
        if not fields:
            return None
        data = {_text(k): _text(v) for k, v in fields.items()}
        return Pin(
            tool=tool,
            hash=data["hash"],
            definition=data["definition"],
            pinned_at=float(data["pinned_at"]),
            pinned_by=data["pinned_by"],
        )

    def put(self, pin: Pin) -> None:
        self._client.hset(self._prefix + pin.tool, mapping=_fields(pin))

    def add(self, pin: Pin) -> Pin:
        key = self._prefix + pin.tool
        if self._client.hsetnx(key, "hash", pin.hash):
            self._client.hset(key, mapping=_fields(pin))
        stored = self.get(pin.tool)
        assert stored is not None
        return stored


def _fields(pin: Pin) -> dict[str, str]:
    return {
        "hash": pin.hash,
        "definition": pin.definition,
        "pinned_at": repr(pin.pinned_at),
        "pinned_by": pin.pinned_by,
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def open_pin_store(spec: str | None, redis_client: Any = None) -> PinStore:
    """The pin store beside the guard's stores: memory, a SQLite file, or the same Redis."""
    if spec is None:
        return MemoryPinStore()
    if redis_client is not None:
        return RedisPinStore(redis_client)
    return SQLitePinStore(spec)


def instructions(definition: Mapping[str, Any]) -> str | None:
    """The injection rule that the model-facing text of a definition (every title and description,
    the schema's included) matches, or None."""
    from telemetry.masking import detect_injection

    texts: list[str] = []
    stack: list[Any] = [definition]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            texts.extend(
                v for k, v in node.items() if k in ("title", "description") and isinstance(v, str)
            )
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return detect_injection(texts)


def owner_pin(exposed: str, key: str, *, by: str) -> Pin:
    """The pin of which upstream tool (``upstream/tool``) answers to downstream name ``exposed``."""
    return Pin(
        tool=f"name:{exposed}",
        hash=hashlib.sha256(key.encode()).hexdigest(),
        definition=json.dumps({"owner": key}),
        pinned_at=time.time(),
        pinned_by=by,
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """Whether a listed definition may be used, and if not, why (for the log and the operator)."""

    blocked: bool
    why: str | None = None
    seen: tuple[str | None, str | None] = (None, None)
    """The definition pin's and the name pin's hashes as found: a change means an operator acted."""


def review(
    pins: PinStore, key: str, exposed: str, definition: Mapping[str, Any], flagged: str | None
) -> Verdict:
    """Pin a first-seen definition (unless it reads like instructions), and judge it against its pins.

    Blocked: the definition no longer matches its pin; the downstream name belonged to another
    upstream tool (one upstream dropped it and another took the name); or, seen for the first time,
    ``flagged`` by the injection detector, so an operator reviews it before the model reads it.
    The pin's hash is recomputed from the stored definition, so a wider hash (``title`` added) does
    not block what was pinned before it."""
    pin = pins.get(key)
    if pin is None and flagged is None:
        pin = pins.add(new_pin(key, definition, by="gateway (first seen)"))
    owner = pins.add(owner_pin(exposed, key, by="gateway (first seen)"))
    seen = (pin.hash if pin is not None else None, owner.hash)
    if owner.definition != json.dumps({"owner": key}):
        was = json.loads(owner.definition).get("owner")
        return Verdict(blocked=True, why=f"the name was {was}'s", seen=seen)
    if pin is None:
        return Verdict(
            blocked=True, why=f"first seen reading like instructions ({flagged})", seen=seen
        )
    if definition_hash(json.loads(pin.definition)) != definition_hash(definition):
        return Verdict(blocked=True, why="changed since it was pinned", seen=seen)
    return Verdict(blocked=False, seen=seen)


def pin_diff(pin: Pin | None, definition: Mapping[str, Any]) -> list[str]:
    """The unified diff from the pinned definition to ``definition``, for the operator to read."""
    import difflib

    def lines(value: Any) -> list[str]:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    before = lines(json.loads(pin.definition)) if pin is not None else []
    return list(
        difflib.unified_diff(before, lines(definition), "pinned", "upstream now", lineterm="")
    )


def new_pin(tool: str, definition: Mapping[str, Any], *, by: str) -> Pin:
    """A pin of ``definition`` for ``tool`` made now by ``by``."""
    return Pin(
        tool=tool,
        hash=definition_hash(definition),
        definition=json.dumps(definition, sort_keys=True, ensure_ascii=False),
        pinned_at=time.time(),
        pinned_by=by,
    )
