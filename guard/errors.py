"""Exceptions. Expected outcomes of a call are values (``ToolResult``); exceptions are for three things.

::

    GuardError                    base of everything callgate raises on purpose
    ├── ConfigurationError        the guard or a tool is declared wrongly (raised at build time)
    ├── RuleViolation             a business check refuses the call; the rules stage turns it into a result
    └── TransientError            a backend failure worth retrying (with the same idempotency key)

A handler may raise ``RuleViolation`` for a refusal the backend makes (never retried) and
``TransientError`` or ``TimeoutError`` for failures worth retrying. Anything else a handler raises is a
bug: it is logged with its traceback and the model gets ``INTERNAL_ERROR``.
"""

from __future__ import annotations

from typing import Any

from guard.codes import Code

__all__ = ["ConfigurationError", "GuardError", "RuleViolation", "TransientError"]


class GuardError(Exception):
    """Base class of callgate's own exceptions."""


class ConfigurationError(GuardError):
    """A guard, policy or tool is declared in a way that cannot work."""


class RuleViolation(GuardError):
    """A business rule refuses the call. ``message`` is shown to the model, so keep it actionable."""

    def __init__(self, code: Code, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class TransientError(GuardError):
    """A failure that may pass on retry: connection reset, 503, lock timeout."""
