"""Reason codes: the stable vocabulary of every outcome.

Codes are span attributes, table columns and dashboard labels, so they are added and never renamed.
Each code carries a short phrase, the stage that produces it, whether the model can fix the call by
sending a corrected one (``fixable``, which is what the recovery-rate metric measures), and the
advice the model gets with it.

``Code`` is callgate's own, closed set. A deployment adds its own codes with ``DomainCode``: the same
four properties, validated when declared (a stable spelling, no clash with a core code) and when the
guard is built (one meaning per spelling)::

    ITEM_UNAVAILABLE = DomainCode(
        "ITEM_UNAVAILABLE",
        stage="rules",
        fixable=True,
        phrase="The item variant is not available.",
        advice="Offer the user an available variant of the same product.",
    )
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import StrEnum
from typing import TypeAlias

from guard.errors import ConfigurationError

__all__ = ["DOMAIN_STAGES", "HUMAN_GATES", "Code", "DomainCode", "ReasonCode", "code_table"]


class Code(StrEnum):
    """Why a call ended the way it did. ``OK`` is the only success code."""

    phrase: str
    stage: str
    fixable: bool
    advice: str

    def __new__(cls, value: str, phrase: str, stage: str, fixable: bool, advice: str) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.phrase = phrase
        member.stage = stage
        member.fixable = fixable
        member.advice = advice
        return member

    OK = ("OK", "The call ran.", "execute", False, "Use the result.")

    # budget
    STEP_LIMIT = (
        "STEP_LIMIT",
        "Too many tool calls in this session or turn.",
        "budget",
        False,
        "Stop calling tools; answer or hand over.",
    )
    RATE_LIMITED = (
        "RATE_LIMITED",
        "Too many tool calls per second.",
        "budget",
        False,
        "Wait, then retry once.",
    )
    VALIDATION_BUDGET_EXHAUSTED = (
        "VALIDATION_BUDGET_EXHAUSTED",
        "Too many invalid calls in a row; hand over to the user.",
        "budget",
        False,
        "Stop; ask the user or hand over to a human.",
    )
    SESSION_LIMIT = (
        "SESSION_LIMIT",
        "The stores are full: new sessions are refused rather than forget others' state.",
        "budget",
        False,
        "Do not retry; tell the user to try again later.",
    )

    # resolve
    UNKNOWN_TOOL = (
        "UNKNOWN_TOOL",
        "No tool by that name.",
        "resolve",
        True,
        "Use one of the listed tools.",
    )
    TOOL_NOT_ALLOWED = (
        "TOOL_NOT_ALLOWED",
        "The tool is not allowed here.",
        "resolve",
        False,
        "Do not retry; tell the user.",
    )
    PERMISSION_DENIED = (
        "PERMISSION_DENIED",
        "The session lacks the tool's scope.",
        "resolve",
        False,
        "Do not retry.",
    )
    AUTH_REQUIRED = (
        "AUTH_REQUIRED",
        "The tool needs a known user, and none is identified yet.",
        "resolve",
        True,
        "Identify the user first with the tool named, then call again.",
    )
    TOOL_DEFINITION_CHANGED = (
        "TOOL_DEFINITION_CHANGED",
        "The tool's definition changed since it was approved.",
        "resolve",
        False,
        "Do not retry; tell the user the tool is unavailable.",
    )

    # parse and schema
    INVALID_JSON = (
        "INVALID_JSON",
        "Arguments are not a JSON object.",
        "parse",
        True,
        "Send one JSON object.",
    )
    INVALID_ARGUMENTS = (
        "INVALID_ARGUMENTS",
        "Arguments do not match the tool's schema.",
        "schema",
        True,
        "Fix the listed fields; ask the user instead of guessing.",
    )

    # idempotency and loops
    LOOP_DETECTED = (
        "LOOP_DETECTED",
        "The same call was repeated too often.",
        "idempotency",
        False,
        "Use the previous result.",
    )
    IN_PROGRESS = (
        "IN_PROGRESS",
        "An identical write is already running.",
        "idempotency",
        False,
        "Wait for its result; do not resend.",
    )
    IDEMPOTENCY_CONFLICT = (
        "IDEMPOTENCY_CONFLICT",
        "The idempotency key was used with different arguments.",
        "idempotency",
        False,
        "Do not retry.",
    )

    # rules
    NOT_FOUND = (
        "NOT_FOUND",
        "No such record for this principal.",
        "rules",
        True,
        "Ask the user to check the id.",
    )
    PREREQUISITE_MISSING = (
        "PREREQUISITE_MISSING",
        "Another tool must run first for this record.",
        "rules",
        True,
        "Call the named tool first.",
    )
    INVALID_STATE = (
        "INVALID_STATE",
        "The record's state does not allow this action.",
        "rules",
        False,
        "Tell the user.",
    )

    # policy
    POLICY_LIMIT = (
        "POLICY_LIMIT",
        "A per-request or daily limit would be exceeded.",
        "policy",
        False,
        "Do not split the request; offer a human.",
    )
    TAINTED_CONTEXT = (
        "TAINTED_CONTEXT",
        "Untrusted content was read in this session; a human must confirm writes.",
        "confirm",
        False,
        "Tell the user it awaits approval.",
    )
    UNTRUSTED_VALUE = (
        "UNTRUSTED_VALUE",
        "A recipient, account, URL or other sink argument carries a value that came from untrusted "
        "content and that no trusted source vouches for; a human must confirm.",
        "confirm",
        False,
        "Tell the user it awaits approval; do not call again.",
    )

    # confirmation
    CONFIRMATION_REQUIRED = (
        "CONFIRMATION_REQUIRED",
        "A human must approve this call.",
        "confirm",
        False,
        "Tell the user it awaits approval; do not call again.",
    )
    CONFIRMATION_DENIED = (
        "CONFIRMATION_DENIED",
        "A human denied this call.",
        "confirm",
        False,
        "Do not retry; tell the user.",
    )
    CONFIRMATION_EXPIRED = (
        "CONFIRMATION_EXPIRED",
        "The approval window closed before a decision.",
        "confirm",
        False,
        "Ask the user whether to propose it again.",
    )

    # execute
    UPSTREAM_UNAVAILABLE = (
        "UPSTREAM_UNAVAILABLE",
        "The backend kept failing.",
        "execute",
        False,
        "Tell the user to try later.",
    )
    TIMEOUT = (
        "TIMEOUT",
        "The backend did not answer in time.",
        "execute",
        False,
        "Do not retry; check the status first.",
    )
    UPSTREAM_REJECTED = (
        "UPSTREAM_REJECTED",
        "The backend refused the request.",
        "execute",
        False,
        "Tell the user; offer a human.",
    )
    INTERNAL_ERROR = (
        "INTERNAL_ERROR",
        "An unexpected error; nothing to fix in the call.",
        "execute",
        False,
        "Do not retry; offer a human.",
    )

    @property
    def ok(self) -> bool:
        """True only for ``OK``."""
        return self is Code.OK

    @property
    def asks_human(self) -> bool:
        """The call waits for a human's approval: one of :data:`HUMAN_GATES`."""
        return self in HUMAN_GATES


HUMAN_GATES = frozenset({Code.CONFIRMATION_REQUIRED, Code.TAINTED_CONTEXT, Code.UNTRUSTED_VALUE})
"""The codes of a call that waits for a human: a risky call (CONFIRMATION_REQUIRED, fixed or by
arguments), untrusted text read in the session (TAINTED_CONTEXT), or a sink argument no trusted
source vouches for (UNTRUSTED_VALUE). A check may ask for a human with any of them."""


DOMAIN_STAGES = ("rules", "execute")
"""Where a deployment's code can end a call: its business checks (rules) or its handlers (execute)."""

_SPELLING = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
_CORE = frozenset(Code.__members__)


class DomainCode(str):
    """A deployment's own reason code: a string like a core code, with the same four properties.

    Compares and hashes as its spelling, so ``result.code == "ITEM_UNAVAILABLE"`` holds; raises
    ``ConfigurationError`` when declared with a spelling that is not UPPER_SNAKE (at most 64
    characters), that a core code already uses, or with an unknown stage or an empty phrase or advice.
    """

    phrase: str
    """A short sentence: what the code means."""
    stage: str
    """The stage that produces it: ``rules`` (a check) or ``execute`` (a handler)."""
    fixable: bool
    """The model can fix the call by sending a corrected one (the default for ``RuleViolation``)."""
    advice: str
    """What the model should do next; the message when a check gives none of its own."""

    def __new__(
        cls, value: str, *, stage: str, fixable: bool, phrase: str, advice: str
    ) -> DomainCode:
        if not isinstance(value, str) or not _SPELLING.fullmatch(value) or len(value) > 64:
            raise ConfigurationError(
                f"domain code {value!r}: spell it UPPER_SNAKE (A-Z, 0-9, _), at most 64 characters"
            )
        if value in _CORE:
            raise ConfigurationError(f"domain code {value!r} is a core code: choose another name")
        if stage not in DOMAIN_STAGES:
            raise ConfigurationError(
                f"domain code {value!r}: stage must be one of {', '.join(DOMAIN_STAGES)}, not {stage!r}"
            )
        if not phrase.strip() or not advice.strip():
            raise ConfigurationError(f"domain code {value!r} needs a phrase and an advice")
        member = str.__new__(cls, value)
        member.phrase = phrase.strip()
        member.stage = stage
        member.fixable = bool(fixable)
        member.advice = advice.strip()
        return member

    @property
    def name(self) -> str:
        """The spelling, as ``Code.name`` is for core codes."""
        return str.__str__(self)

    @property
    def value(self) -> str:
        """The spelling, as ``Code.value`` is for core codes."""
        return str.__str__(self)

    @property
    def ok(self) -> bool:
        """Never: only the core ``OK`` is a success."""
        return False

    def __repr__(self) -> str:
        return f"DomainCode({str.__repr__(self)}, stage={self.stage!r}, fixable={self.fixable})"

    def __reduce__(self) -> tuple[object, ...]:  # pickles with its properties
        return (
            _rebuild,
            (str.__str__(self), self.stage, self.fixable, self.phrase, self.advice),
        )


def _rebuild(value: str, stage: str, fixable: bool, phrase: str, advice: str) -> DomainCode:
    return DomainCode(value, stage=stage, fixable=fixable, phrase=phrase, advice=advice)


ReasonCode: TypeAlias = Code | DomainCode
"""Any code a result can carry: a core ``Code`` or a deployment's ``DomainCode``."""


def code_table(domain: Iterable[DomainCode] = ()) -> dict[str, ReasonCode]:
    """Every code by spelling: the core codes, then ``domain`` in the order given.

    Raises ``ConfigurationError`` when two domain codes share a spelling with different properties
    (the same code declared twice, by two tools, is fine).
    """
    table: dict[str, ReasonCode] = {code.value: code for code in Code}
    for code in domain:
        if not isinstance(code, DomainCode):
            raise ConfigurationError(f"{code!r} is not a DomainCode")
        known = table.get(code.value)
        if known is None:
            table[code.value] = code
        elif not isinstance(known, DomainCode) or _properties(known) != _properties(code):
            raise ConfigurationError(
                f"domain code {code.value!r} is declared twice with different meanings"
            )
    return table


def _properties(code: DomainCode) -> tuple[str, bool, str, str]:
    return (code.stage, code.fixable, code.phrase, code.advice)
