"""Exceptions. Expected outcomes of a call are values (``ToolResult``); exceptions are for three things.

::

    GuardError                    base of everything callgate raises on purpose
    ├── ConfigurationError        the guard or a tool is declared wrongly (raised at build time)
    ├── RuleViolation             a business check refuses the call; the rules stage turns it into a result
    ├── HumanRequired             a business check lets the call through only with a human's approval
    └── TransientError            a backend failure worth retrying (with the same idempotency key)

A handler may raise ``RuleViolation`` for a refusal the backend makes (never retried) and
``TransientError`` or ``TimeoutError`` for failures worth retrying. Anything else a handler raises is a
bug: it is logged with its traceback and the model gets ``INTERNAL_ERROR``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from guard.codes import ReasonCode
    from guard.result import Problem

__all__ = ["ConfigurationError", "GuardError", "HumanRequired", "RuleViolation", "TransientError"]


class GuardError(Exception):
    """Base class of callgate's own exceptions."""


class ConfigurationError(GuardError):
    """A guard, policy or tool is declared in a way that cannot work."""


class RuleViolation(GuardError):
    """A business rule refuses the call. ``message`` is shown to the model, so keep it actionable.

    ``code`` is a core ``Code`` or the deployment's ``DomainCode``. Without a ``message`` the model
    gets the problems (if any) and the code's advice. ``fixable`` overrides the code's own flag for
    this one refusal (choosing another variant is fixable; a closed account is not), and
    ``problems`` names what is wrong field by field, as schema errors do (``data.problems``).
    """

    def __init__(
        self,
        code: ReasonCode,
        message: str | None = None,
        *,
        data: dict[str, Any] | None = None,
        fixable: bool | None = None,
        problems: Iterable[Problem] = (),
    ) -> None:
        self.code = code
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.fixable: bool = code.fixable if fixable is None else fixable
        if message is None:
            listed = "; ".join(problem.sentence() for problem in self.problems)
            message = f"{code.phrase} {listed + '. ' if listed else ''}{code.advice}"
        super().__init__(message)
        self.message = message
        if self.problems:
            data = {**(data or {}), "problems": [problem.to_dict() for problem in self.problems]}
        self.data = data


class HumanRequired(GuardError):
    """A business check asks for a human: the call waits as a pending approval, as a risky one does.

    ``code`` is one of ``guard.codes.HUMAN_GATES`` (``UNTRUSTED_VALUE`` by default); ``message``
    (for the model) says why. The same as calling ``CheckContext.ask_human``. After a human
    approves, the check runs again and its request is already answered: one approval per call.
    """

    def __init__(self, code: ReasonCode | None = None, message: str | None = None) -> None:
        from guard.codes import Code

        self.code: ReasonCode = Code.UNTRUSTED_VALUE if code is None else code
        super().__init__(message or self.code.phrase)
        self.message = message


class TransientError(GuardError):
    """A failure that may pass on retry: connection reset, 503, lock timeout."""
