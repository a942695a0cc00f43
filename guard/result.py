"""The one value every call ends with."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from guard.codes import HUMAN_GATES, ReasonCode

__all__ = ["Advisory", "Outcome", "Problem", "ToolResult"]


class Outcome(StrEnum):
    """What happened in the world: the thing an incident responder asks first."""

    APPLIED = "applied"
    """The handler ran (a read answered, or a write took effect)."""
    NOT_APPLIED = "not_applied"
    """Nothing happened: the call was rejected or the backend refused it."""
    UNKNOWN = "unknown"
    """A write may or may not have taken effect (timeout after the request was sent)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One thing wrong with the arguments, in terms the model can act on."""

    path: str
    """JSON pointer to the field (``/amount_cents``; ``""`` for the whole object)."""
    rule: str
    """The rule that failed (pydantic's error type: ``int_type``, ``missing``, ``extra_forbidden``)."""
    expected: str
    """What the field accepts, in words."""
    got: str
    """A truncated rendering of what was sent."""
    hint: str | None = None
    """The field's description, which says its unit or format."""

    def to_dict(self) -> dict[str, Any]:
        data = {"path": self.path, "rule": self.rule, "expected": self.expected, "got": self.got}
        if self.hint:
            data["hint"] = self.hint
        return data

    def sentence(self) -> str:
        """One line for the model: ``/items/0 expected an id seen in get_order's result, got "X"``."""
        if not self.got:  # a rule across fields: its own words say what is wrong
            text = f"{self.path or 'the arguments'}: {self.expected}"
        else:
            text = f"{self.path or 'the arguments'} expected {self.expected}, got {self.got}"
        return f"{text} ({self.hint})" if self.hint else text


@dataclass(frozen=True, kw_only=True, slots=True)
class Advisory:
    """A warning that let the call through: the model reads it with the result, spans count it."""

    code: ReasonCode
    """What the warning is about (usually a ``DomainCode``)."""
    message: str
    """For the model: what to tell the user or check."""

    def to_dict(self) -> dict[str, str]:
        return {"code": str(self.code), "message": self.message}


_HUMAN = HUMAN_GATES


@dataclass(kw_only=True, slots=True)
class ToolResult:
    """The outcome of one proposed call. ``execute`` returns one for everything the model sends.

    A value: treat it as immutable. (It is not ``frozen`` because a frozen dataclass costs three
    times as much to build, and one is built on every call.)"""

    ok: bool
    """True when the tool ran and succeeded (or a completed write was replayed)."""
    code: ReasonCode
    """Stable reason code: ``OK`` or why not (a core ``Code`` or the deployment's ``DomainCode``)."""
    message: str
    """For the model: what happened and what to do next. Never internals."""
    data: dict[str, Any] | None = None
    """The filtered result the model may see, or details of the rejection (problems, approval)."""
    replayed: bool = False
    """A repeated write answered with the original result; no new side effect."""
    outcome: Outcome = Outcome.NOT_APPLIED
    """Whether anything happened in the world."""
    call_id: str | None = None
    """The model's id for this call, so the adapter can link the tool-result message."""
    tool: str | None = None
    """The tool the model asked for, as it asked."""
    idempotency_key: str | None = None
    """Set for writes: the key sent to the backend, also with an unknown outcome."""
    approval_id: str | None = None
    """The pending or decided approval this call is bound to."""
    fixable: bool | None = None
    """The model can fix this call by sending a corrected one: the check's own verdict for this
    refusal, else the code's flag (every result the pipeline builds sets it; None on a result
    built by hand means "the code's flag"). What the recovery-rate metric counts."""
    warnings: tuple[Advisory, ...] = ()
    """Warnings that let the call through; the model reads them with the result."""
    shadow: ReasonCode | None = None
    """Shadow mode only: the code the gate would have answered with had it been enforced. The
    call ran as without the gate; ``code`` is what actually happened."""

    @property
    def needs_human(self) -> bool:
        """A human must decide ``approval_id`` before anything happens: show it in your approval UI.

        False for everything else, including replays and results of approved calls that carry an
        ``approval_id``. The same id comes back while it waits if the model proposes the same call
        again, so key the approval queue by it."""
        return self.code in _HUMAN and self.approval_id is not None and not self.replayed

    def for_model(self) -> dict[str, Any]:
        """The payload rendered into the tool-result message: what the model may read."""
        payload: dict[str, Any] = {"ok": self.ok, "code": str(self.code), "message": self.message}
        if self.data is not None:
            payload["data"] = self.data
        if self.replayed:
            payload["replayed"] = True
        if self.outcome is Outcome.UNKNOWN:
            payload["outcome"] = str(self.outcome)
            payload["idempotency_key"] = self.idempotency_key
        if self.approval_id is not None and not self.ok:
            payload["approval_id"] = self.approval_id
        if self.warnings:
            payload["warnings"] = [warning.to_dict() for warning in self.warnings]
        return payload
