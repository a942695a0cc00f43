"""A tool library's own exceptions, read as refusals the model understands.

A backend client raises its own types (``OrderNotFound``, ``InsufficientFunds``); a deployment maps
them to reason codes once, per guard (``Guard(refusals=...)``) or per tool (``refusals=`` on the
tool, which wins), instead of wrapping every handler and check in ``try``/``except RuleViolation``.
A mapped exception is a ``RuleViolation`` with that code: nothing happened, it is never retried,
and the model reads the code's phrase and advice, never the exception's text (which may carry
internals). The most specific mapped class of the exception's type wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from guard.codes import Code, DomainCode, ReasonCode
from guard.errors import ConfigurationError, GuardError, RuleViolation

__all__ = ["Refusals", "as_refusal", "check_refusals"]

Refusals: TypeAlias = Mapping[type[Exception], ReasonCode]
"""Exception type -> the reason code it means."""


def as_refusal(error: Exception, own: Refusals, shared: Refusals) -> RuleViolation | None:
    """``error`` as the refusal ``own`` (the tool's) or ``shared`` (the guard's) maps it to."""
    if isinstance(error, GuardError) or not (own or shared):  # already a refusal, or ours
        return None
    for kind in type(error).__mro__:
        code = own.get(kind) or shared.get(kind)
        if code is not None:
            return RuleViolation(code)
    return None


def check_refusals(refusals: Refusals, where: str) -> None:
    """Keys are exception classes, values reason codes that refuse (never ``OK``)."""
    for kind, code in refusals.items():
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            raise ConfigurationError(f"{where}: refusal key {kind!r} is not an exception class")
        if not isinstance(code, Code | DomainCode) or code.ok:
            raise ConfigurationError(f"{where}: {kind.__name__} maps to {code!r}, not a refusal")
