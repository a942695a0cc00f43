"""Scenario files: JSON lines of proposed calls run through a guard, without writing Python.

A call line::

    {"session": "s1", "principal": "CUS-1", "role": "customer", "tool": "refund_order",
     "arguments": "<JSON text exactly as the model sent it, or an object>", "call_id": "c1",
     "approve": true | false | null}

``approve`` true: when the call waits for a human, one approves and the call resumes; false: one
denies; null or absent: it stays pending. With ``"principal": null`` the session starts anonymous
(role ``role``, default ``anonymous``) and learns its user from an authenticating tool. Control lines: ``{"fault": "lose_next_response" |
"transient" | "slow", "count": n}`` and ``{"advance_seconds": n}`` (moves the clock).

Each call yields one output line ``{"call_id", "tool", "ok", "code", "replayed", "outcome",
"message"}`` (with ``warnings`` and ``shadow`` when there are); a malformed line yields ``{"line": n, "error": ...}`` and the run goes on.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from guard.pipeline import Guard, Session
from guard.result import ToolResult
from guard.session import Principal
from guard.shop import ROLE_SCOPES, build_shop
from guard.testing import ManualClock

__all__ = ["ReplayTarget", "Replayer", "load_factory", "shop_target"]

DEFAULT_APPROVER = "replay"


class ReplayTarget(Protocol):
    """What a scenario runs against: a guard, and optionally a backend to count and break."""

    @property
    def guard(self) -> Guard:
        """The guard the calls go through."""


def shop_target(clock: ManualClock) -> ReplayTarget:
    """The shop reference domain on ``clock``."""
    return build_shop(clock=clock)


def load_factory(spec: str) -> Callable[[ManualClock], Any]:
    """``module:factory`` -> the factory. It takes the replay clock and returns a Guard or a target."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--app wants module:factory, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m` does: the project's
        sys.path.insert(0, os.getcwd())  # own modules (examples.retail) import from where you run
    factory = getattr(importlib.import_module(module_name), attribute)
    if not callable(factory):
        raise ValueError(f"{spec} is not callable")
    return factory  # type: ignore[no-any-return]


@dataclass
class _GuardOnly:
    guard: Guard


@dataclass
class Replayer:
    """Runs scenario lines against one target, keeping sessions and counts across lines."""

    target: Any
    clock: ManualClock
    sessions: dict[str, Session] = field(default_factory=dict)
    codes: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    ok: int = 0
    errors: int = 0

    @classmethod
    def create(cls, factory: Callable[[ManualClock], Any] = shop_target) -> Replayer:
        clock = ManualClock(start=time.time())
        target = factory(clock)
        if isinstance(target, Guard):
            target = _GuardOnly(guard=target)
        return cls(target=target, clock=clock)

    def run(self, lines: Iterable[str]) -> Iterator[dict[str, Any]]:
        """One output record per call line (or malformed line), then the summary."""
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("a line must be a JSON object")
                output = self._line(record)
            except (ValueError, KeyError, TypeError) as error:
                self.errors += 1
                yield {"line": number, "error": str(error)[:200]}
                continue
            if output is not None:
                yield output
        yield {"summary": self.summary()}

    def summary(self) -> dict[str, Any]:
        backend = getattr(self.target, "backend", None)
        return {
            "calls": self.calls,
            "ok": self.ok,
            "side_effects": getattr(backend, "side_effects", None),
            "by_code": dict(sorted(self.codes.items())),
            "malformed_lines": self.errors,
        }

    def _line(self, record: dict[str, Any]) -> dict[str, Any] | None:
        if "fault" in record:
            backend = getattr(self.target, "backend", None)
            if backend is None or not hasattr(backend, "inject"):
                raise ValueError("this target has no backend to inject faults into")
            backend.inject(str(record["fault"]), int(record.get("count", 1)))
            return None
        if "advance_seconds" in record:
            self.clock.advance(float(record["advance_seconds"]))
            return None
        return self._call(record)

    def _call(self, record: dict[str, Any]) -> dict[str, Any]:
        session = self._session(record)
        arguments = record.get("arguments")
        if arguments is not None and not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        result = session.execute(str(record["tool"]), arguments, call_id=record.get("call_id"))
        approve = record.get("approve")
        if approve is not None and result.needs_human and result.approval_id is not None:
            guard = self.target.guard
            decide = guard.approve if approve else guard.deny
            result = decide(result.approval_id, by=str(record.get("approver", DEFAULT_APPROVER)))
        self.calls += 1
        self.ok += result.ok
        self.codes[str(result.code)] += 1
        return _output(result, record.get("call_id"))

    def _session(self, record: dict[str, Any]) -> Session:
        session_id = str(record.get("session", "default"))
        session = self.sessions.get(session_id)
        if session is None:
            if "principal" in record and record["principal"] is None:  # nobody known yet
                principal = Principal.anonymous(role=str(record.get("role", "anonymous")))
            else:
                role = str(record.get("role", "customer"))
                principal = Principal(
                    id=str(record["principal"]),
                    role=role,
                    scopes=ROLE_SCOPES.get(role, frozenset()),
                )
            session = self.sessions[session_id] = self.target.guard.session(session_id, principal)
        if record.get("new_turn"):
            session.next_turn()
        return session


def _output(result: ToolResult, call_id: Any) -> dict[str, Any]:
    return (
        {
            "call_id": call_id,
            "tool": result.tool,
            "ok": result.ok,
            "code": str(result.code),
            "replayed": result.replayed,
            "outcome": str(result.outcome),
            "message": result.message,
        }
        | ({"warnings": [str(w.code) for w in result.warnings]} if result.warnings else {})
        | ({"shadow": str(result.shadow)} if result.shadow is not None else {})
    )
