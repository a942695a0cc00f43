"""Why a session is tainted: the call whose untrusted result made later writes wait for a human.

After a tool returns untrusted outside text (``guard.untrusted``), the guard marks the session
tainted and every later write in it needs a human (``TAINTED_CONTEXT``). The write's own span says
only that; :func:`tainted_by` finds the read that caused it, with its injection flag and rule, so
the Trace explorer can link the held write to it.

Definition: the call that tainted a session before time ``t`` is the session's first call that
started at or before ``t`` with ``guard.untrusted = true`` (the first untrusted result sets the
mark; later ones find it already set). ``untrusted_calls`` counts all of them up to ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .query import Source, backend_of, rows_as

__all__ = ["TaintSource", "tainted_by"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TaintSource:
    """The call that tainted a session."""

    trace_id: str
    start_time: datetime
    step: int | None
    tool: str | None
    call_id: str | None
    injection_detected: bool | None
    """Instruction-like text was found in its result (``guard.injection.detected``)."""
    injection_rule: str | None
    """The detector rule that matched (``guard.injection.rule``)."""
    message: str | None
    """The message the model received for that call (masked)."""
    untrusted_calls: int
    """Calls of the session up to ``t`` that returned untrusted text (this one included)."""


def tainted_by(source: Source, session: str, *, before: datetime) -> TaintSource | None:
    """The call that tainted ``session`` by ``before``; None when no call returned untrusted text."""
    b = backend_of(source)
    d = b.dialect
    rows = b.fetch(
        f"""
        SELECT trace_id, start_time, step, tool, call_id, injection_detected, injection_rule,
               message, count(*) OVER () AS untrusted_calls
        FROM {d.calls}
        WHERE session = {d.param("session", "string")}
          AND untrusted
          AND start_time <= {d.param("before", "timestamp")}
        ORDER BY start_time, step
        LIMIT 1
        """,
        {"session": session, "before": d.value(before)},
    )
    found = rows_as(TaintSource, rows)
    return found[0] if found else None
