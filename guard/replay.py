"""Scenario files: JSON lines of proposed calls run through a guard, without writing Python.

A call line::

    {"session": "s1", "principal": "CUS-1", "role": "customer", "tool": "refund_order",
     "arguments": "<JSON text exactly as the model sent it, or an object>", "call_id": "c1",
     "approve": true | false | null, "new_turn": false, "turn": 2,
     "expect": {"code": "OK", "replayed": false}}

``approve`` true: when the call waits for a human, one approves at once and the call resumes; false:
one denies; null or absent: it stays pending (a later ``decide`` line may settle it). ``new_turn``
starts the next turn; ``turn`` moves the session on to that turn (for hosts that mark turns). With
``"principal": null`` the session starts anonymous (role ``role``, default ``anonymous``) and learns
its user from an authenticating tool. ``expect`` is
the decision recorded for the call (``callgate export --scenario`` writes it); ``replay --check``
lists every call whose code now differs.

Control lines: ``{"fault": "lose_next_response" | "transient" | "slow", "count": n}`` (the target's
backend misbehaves), ``{"advance_seconds": s}`` (the clock moves on), ``{"at": epoch_seconds}`` (the
clock moves to that time: before the first call it may set any time, after it only a later one), and ``{"decide": "<call id>", "approve": true | false,
"approver": "...", "expect": {...}}`` (a human decides a pending call later).

Each call or decision yields one output line ``{"call_id", "tool", "ok", "code", "replayed",
"outcome", "message"}`` (plus ``warnings`` and ``shadow`` when there are, and ``expected`` and
``changed`` when it had an expectation); a malformed
line yields ``{"line": n, "error": ...}`` and the run goes on; the last line is the summary.
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
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from guard.pipeline import ApprovalNotFound, Guard, Session
from guard.result import ToolResult
from guard.session import Principal
from guard.shop import build_shop
from guard.testing import ManualClock

__all__ = ["ReplayTarget", "Replayer", "load_factory", "role_scopes", "shop_target"]

DEFAULT_APPROVER = "replay"

MAX_ADVANCE_SECONDS = 10 * 366 * 86_400.0
"""A clock step larger than ten years is a typo, not a scenario."""


class ReplayTarget(Protocol):
    """What a scenario runs against: a guard, and optionally a backend to count and break."""

    @property
    def guard(self) -> Guard:
        """The guard the calls go through."""


def shop_target(clock: ManualClock) -> ReplayTarget:
    """The shop reference domain on ``clock``."""
    return build_shop(clock=clock)


def load_factory(spec: str) -> Callable[[ManualClock], Any]:
    """``module:factory`` -> the factory. It takes the replay clock and returns a Guard or a target.

    Raises ``ValueError`` with the reason when the spec is malformed, the module cannot be imported
    or has no such callable.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"--app wants module:factory, got {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:  # as `python -m` does: the project's
        sys.path.insert(0, os.getcwd())  # own modules (examples.retail) import from where you run
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"cannot import {module_name!r}: {error}") from error
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ValueError(f"{module_name} has no callable {attribute!r}")
    return factory  # type: ignore[no-any-return]


def role_scopes(target: Any, guard: Guard, role: str) -> frozenset[str]:
    """The scopes a session of ``role`` gets: the target's own table (``target.role_scopes``) when
    it has one, else every scope the role's allowlist implies."""
    table = getattr(target, "role_scopes", None)
    if isinstance(table, dict) and role in table:
        return frozenset(table[role])
    policy = guard.policy.role(role)
    allowed = policy.tools if policy else frozenset()
    return frozenset(
        spec.scope for spec in guard.registry.values() if spec.name in allowed and spec.scope
    )


# -- the lines ------------------------------------------------------------------------------------


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Expectation(_Line):
    """The decision recorded for a call."""

    code: str
    replayed: bool | None = None


class CallLine(_Line):
    session: str = "default"
    principal: str | None = Field(default=None, min_length=1)
    """Who a new session acts for (later lines of a session may leave it out); null: the session
    starts anonymous and learns its user from an authenticating tool."""
    role: str | None = None
    """Default ``customer``, or ``anonymous`` for an anonymous session."""
    tool: str
    arguments: str | dict[str, Any] | None = None
    call_id: str | None = None
    approve: bool | None = None
    approver: str = DEFAULT_APPROVER
    new_turn: bool = False
    turn: int | None = Field(default=None, ge=1, le=1_000_000)
    """The turn the call belongs to, for a host that marks turns: the session moves on to it."""
    expect: Expectation | None = None
    context: bool = False


class FaultLine(_Line):
    fault: Literal["lose_next_response", "transient", "slow"]
    count: int = Field(default=1, ge=1, le=10_000)


class AdvanceLine(_Line):
    advance_seconds: float = Field(ge=0, le=MAX_ADVANCE_SECONDS, allow_inf_nan=False)

    @field_validator("advance_seconds", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class AtLine(_Line):
    at: float = Field(ge=0, le=1e11, allow_inf_nan=False)

    @field_validator("at", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DecideLine(_Line):
    decide: str
    approve: bool
    approver: str = DEFAULT_APPROVER
    expect: Expectation | None = None


_KINDS: tuple[tuple[str, type[_Line]], ...] = (
    ("fault", FaultLine),
    ("advance_seconds", AdvanceLine),
    ("at", AtLine),
    ("decide", DecideLine),
)


def parse_line(text: str) -> _Line:
    """One scenario line, strictly: raises ``ValueError`` saying what is wrong."""
    try:
        record = json.loads(text)
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from error
    if not isinstance(record, dict):
        raise ValueError("a line must be a JSON object")
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError("it holds text UTF-8 cannot carry (a lone surrogate)") from error
    except RecursionError as error:
        raise ValueError("nested too deeply") from error
    model: type[_Line] = next((m for key, m in _KINDS if key in record), CallLine)
    try:
        return model.model_validate(record)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = "/".join(str(part) for part in first["loc"]) or "(the line)"
        raise ValueError(f"{where}: {first['msg']}") from None
    except RecursionError as error:
        raise ValueError("nested too deeply") from error


# -- the run --------------------------------------------------------------------------------------


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
    pending: dict[str, str] = field(default_factory=dict)
    """call id -> approval id of calls that wait for a human."""
    calls: int = 0
    ok: int = 0
    errors: int = 0
    checked: int = 0
    changed: int = 0

    @classmethod
    def create(cls, factory: Callable[[ManualClock], Any] = shop_target) -> Replayer:
        clock = ManualClock(start=time.time())
        target = factory(clock)
        if isinstance(target, Guard):
            target = _GuardOnly(guard=target)
        return cls(target=target, clock=clock)

    def run(self, lines: Iterable[str]) -> Iterator[dict[str, Any]]:
        """One output record per call line (or malformed line), then the summary."""
        for number, text in enumerate(lines, start=1):
            if not text.strip():
                continue
            try:
                line = parse_line(text)
                output = self._line(line)
            except ValueError as error:
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
            "checked": self.checked,
            "changed": self.changed,
        }

    def _line(self, line: _Line) -> dict[str, Any] | None:
        if isinstance(line, FaultLine):
            backend = getattr(self.target, "backend", None)
            if backend is None or not hasattr(backend, "inject"):
                raise ValueError("this target has no backend to inject faults into")
            backend.inject(line.fault, line.count)
            return None
        if isinstance(line, AdvanceLine):
            self.clock.advance(line.advance_seconds)
            return None
        if isinstance(line, AtLine):
            # Before the first call the scenario sets the time (an exported one starts in the
            # past); after it, time only moves forward, so no window or expiry is undone.
            if line.at > self.clock.now() or self.calls == 0:
                self.clock.advance(line.at - self.clock.now())
            return None
        if isinstance(line, DecideLine):
            return self._decide(line)
        assert isinstance(line, CallLine)
        return self._call(line)

    def _call(self, line: CallLine) -> dict[str, Any]:
        session = self._session(line)
        arguments = line.arguments
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        result = session.execute(line.tool, arguments, call_id=line.call_id)
        approval_id = _waiting_for(result)
        if approval_id is not None and line.approve is not None:
            result = self._settle(approval_id, line.approve, line.approver)
        elif approval_id is not None and line.call_id is not None:
            self.pending[line.call_id] = approval_id
        return self._record(result, line.call_id, line.expect)

    def _decide(self, line: DecideLine) -> dict[str, Any]:
        approval_id = self.pending.pop(line.decide, None)
        if approval_id is None:
            raise ValueError(f"no call {line.decide!r} waits for a decision")
        return self._record(
            self._settle(approval_id, line.approve, line.approver), line.decide, line.expect
        )

    def _settle(self, approval_id: str, approve: bool, approver: str) -> ToolResult:
        guard = self.target.guard
        decide = guard.approve if approve else guard.deny
        try:
            result: ToolResult = decide(approval_id, by=approver)
        except ApprovalNotFound as error:
            raise ValueError(f"approval {approval_id} is gone") from error
        return result

    def _record(
        self, result: ToolResult, call_id: str | None, expect: Expectation | None
    ) -> dict[str, Any]:
        self.calls += 1
        self.ok += result.ok
        self.codes[str(result.code)] += 1
        output = _output(result, call_id)
        if expect is not None:
            changed = expect.code != str(result.code) or (
                expect.replayed is not None and expect.replayed != result.replayed
            )
            self.checked += 1
            self.changed += changed
            output["expected"] = expect.model_dump(exclude_none=True)
            output["changed"] = changed
        return output

    def _session(self, line: CallLine) -> Session:
        session = self.sessions.get(line.session)
        if session is None:
            if "principal" not in line.model_fields_set:
                raise ValueError(
                    f"principal: required on the first line of session {line.session!r}"
                )
            guard = self.target.guard
            if line.principal is None:  # nobody known yet
                principal = Principal.anonymous(role=line.role or "anonymous")
            else:
                role = line.role or "customer"
                principal = Principal(
                    id=line.principal, role=role, scopes=role_scopes(self.target, guard, role)
                )
            session = self.sessions[line.session] = guard.session(
                line.session, principal, turn=line.turn
            )
        if line.new_turn:
            session.next_turn()
        if line.turn is not None:
            if not session.turns_marked:
                session.next_turn()
            while session.turn < line.turn:
                session.next_turn()
        return session


def _output(result: ToolResult, call_id: str | None) -> dict[str, Any]:
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


def _waiting_for(result: ToolResult) -> str | None:
    """The approval a call is held for (None for a replay of a decision already taken)."""
    return result.approval_id if result.needs_human else None
