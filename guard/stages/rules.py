"""Stage 5: the tool's own checks against current state, with typed arguments."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from guard.call import Call
from guard.codes import Code
from guard.errors import RuleViolation, TransientError
from guard.registry import CheckContext
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["RuleStage", "seen_key"]

log = logging.getLogger("guard")


def seen_key(session_id: str, tool: str, record: object) -> str:
    """Marks that ``tool`` succeeded for ``record`` in the session (for prerequisites)."""
    return f"seen:{session_id}:{tool}:{record}"


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleStage:
    """Prerequisites first (they reveal nothing about the record), then the tool's business check.

    A check refuses by raising ``RuleViolation``; its code and message become the result. A check that
    cannot tell a foreign record from a missing one is the point: both are NOT_FOUND, word for word.
    """

    env: Env
    name: str = "rules"

    def __call__(self, call: Call) -> ToolResult | None:
        spec, arguments = call.spec, call.arguments
        assert spec is not None and arguments is not None  # schema ran
        if (need := spec.prerequisite) is not None:
            record = getattr(arguments, need.field)
            key = seen_key(call.session_id, need.tool, record)
            if self.env.counters.get(key, now=call.now) == 0:
                return reject(
                    call,
                    Code.PREREQUISITE_MISSING,
                    f"Call {need.tool} for {need.field}={record} first, check the result with the "
                    f"user, then call {spec.name} again.",
                )
        if spec.check is None:
            return None
        try:
            spec.check(
                arguments, CheckContext(principal=call.principal, session_id=call.session_id)
            )
        except RuleViolation as violation:
            return reject(call, violation.code, violation.message, data=violation.data)
        except (TransientError, TimeoutError, ConnectionError):
            log.warning(
                "business check of %s could not read current state", spec.name, exc_info=True
            )
            return reject(
                call,
                Code.UPSTREAM_UNAVAILABLE,
                "The service is unavailable right now. Nothing was done; tell the user to try later.",
            )
        except Exception:
            log.exception("business check of %s raised", spec.name)
            return reject(call, Code.INTERNAL_ERROR, _INTERNAL)
        return None


_INTERNAL = "Something went wrong on our side. Do not retry; tell the user and offer a human agent."
