"""Reason codes: the stable vocabulary of every outcome.

Codes are span attributes, table columns and dashboard labels, so they are added and never renamed.
Each code carries a short phrase, the stage that produces it, and whether the model can fix the call
by sending a corrected one (``fixable``), which is what the recovery-rate metric measures.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Code"]


class Code(StrEnum):
    """Why a call ended the way it did. ``OK`` is the only success code."""

    phrase: str
    stage: str
    fixable: bool

    def __new__(cls, value: str, phrase: str, stage: str, fixable: bool) -> Code:
        member = str.__new__(cls, value)
        member._value_ = value
        member.phrase = phrase
        member.stage = stage
        member.fixable = fixable
        return member

    OK = ("OK", "The call ran.", "execute", False)

    # budget
    STEP_LIMIT = ("STEP_LIMIT", "Too many tool calls in this session or turn.", "budget", False)
    RATE_LIMITED = ("RATE_LIMITED", "Too many tool calls per second.", "budget", False)
    VALIDATION_BUDGET_EXHAUSTED = (
        "VALIDATION_BUDGET_EXHAUSTED",
        "Too many invalid calls in a row; hand over to the user.",
        "budget",
        False,
    )
    SESSION_LIMIT = (
        "SESSION_LIMIT",
        "The stores are full: new sessions are refused rather than forget others' state.",
        "budget",
        False,
    )

    # resolve
    UNKNOWN_TOOL = ("UNKNOWN_TOOL", "No tool by that name.", "resolve", True)
    TOOL_NOT_ALLOWED = ("TOOL_NOT_ALLOWED", "The tool is not allowed here.", "resolve", False)
    PERMISSION_DENIED = (
        "PERMISSION_DENIED",
        "The session lacks the tool's scope.",
        "resolve",
        False,
    )

    # parse and schema
    INVALID_JSON = ("INVALID_JSON", "Arguments are not a JSON object.", "parse", True)
    INVALID_ARGUMENTS = (
        "INVALID_ARGUMENTS",
        "Arguments do not match the tool's schema.",
        "schema",
        True,
    )

    # idempotency and loops
    LOOP_DETECTED = (
        "LOOP_DETECTED",
        "The same call was repeated too often.",
        "idempotency",
        False,
    )
    IN_PROGRESS = (
        "IN_PROGRESS",
        "An identical write is already running.",
        "idempotency",
        False,
    )
    IDEMPOTENCY_CONFLICT = (
        "IDEMPOTENCY_CONFLICT",
        "The idempotency key was used with different arguments.",
        "idempotency",
        False,
    )

    # rules
    NOT_FOUND = ("NOT_FOUND", "No such record for this principal.", "rules", True)
    PREREQUISITE_MISSING = (
        "PREREQUISITE_MISSING",
        "Another tool must run first for this record.",
        "rules",
        True,
    )
    CURRENCY_MISMATCH = (
        "CURRENCY_MISMATCH",
        "The currency differs from the record's.",
        "rules",
        True,
    )
    AMOUNT_EXCEEDS_REFUNDABLE = (
        "AMOUNT_EXCEEDS_REFUNDABLE",
        "The amount is more than what is still refundable.",
        "rules",
        True,
    )
    INVALID_STATE = (
        "INVALID_STATE",
        "The record's state does not allow this action.",
        "rules",
        False,
    )

    # policy
    POLICY_LIMIT = (
        "POLICY_LIMIT",
        "A per-request or daily limit would be exceeded.",
        "policy",
        False,
    )
    TAINTED_CONTEXT = (
        "TAINTED_CONTEXT",
        "Untrusted content was read in this session; a human must confirm writes.",
        "confirm",
        False,
    )

    # confirmation
    CONFIRMATION_REQUIRED = (
        "CONFIRMATION_REQUIRED",
        "A human must approve this call.",
        "confirm",
        False,
    )
    CONFIRMATION_DENIED = ("CONFIRMATION_DENIED", "A human denied this call.", "confirm", False)
    CONFIRMATION_EXPIRED = (
        "CONFIRMATION_EXPIRED",
        "The approval window closed before a decision.",
        "confirm",
        False,
    )

    # execute
    UPSTREAM_UNAVAILABLE = (
        "UPSTREAM_UNAVAILABLE",
        "The backend kept failing.",
        "execute",
        False,
    )
    TIMEOUT = ("TIMEOUT", "The backend did not answer in time.", "execute", False)
    UPSTREAM_REJECTED = (
        "UPSTREAM_REJECTED",
        "The backend refused the request.",
        "execute",
        False,
    )
    INTERNAL_ERROR = (
        "INTERNAL_ERROR",
        "An unexpected error; nothing to fix in the call.",
        "execute",
        False,
    )

    @property
    def ok(self) -> bool:
        """True only for ``OK``."""
        return self is Code.OK
