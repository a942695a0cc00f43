"""What an approver reads: one rendering of a pending action, escaped so it reads as it runs.

Arguments and tool names reach the approver from the model and from upstream servers, so they
are attacker-shaped text. A right-to-left override (U+202E) makes ``"txt.exe"`` display as
``"exe.txt"``; a newline in a tool name forges a line of the question; a zero-width space makes
two different ids look equal. Every approver-facing rendering (the ``callgate approvals`` CLI,
the gateway's elicitation question, the adapters' interrupt payloads) goes through the functions
here, which make every such character visible as an escape:

- ``visible(text)``: control, format (bidi, zero-width), separator and unassigned characters,
  and every space but U+0020, as ``\\n``, ``\\t``, ``\\u202e``, ``\\U000e0041``; the backslash
  itself doubles, so an escape the attacker typed is told apart from one made here.
- ``visible_json(value)``: JSON whose strings escape the same characters with JSON's own
  ``\\uXXXX``, so it still parses to the exact values.

Values of the arguments the tool marks sensitive are shown as ``[REDACTED:sensitive]``; the
store keeps them exact for the executor.
"""

from __future__ import annotations

import json
import time
import unicodedata
from datetime import UTC, datetime
from typing import Any

from guard.codes import Code
from guard.stores.base import ApprovalState, PendingAction

__all__ = [
    "MASKED",
    "approval_facts",
    "approval_line",
    "approval_question",
    "effective_state",
    "shown_arguments",
    "visible",
    "visible_json",
]

MASKED = "[REDACTED:sensitive]"
"""What an approver sees in place of a sensitive argument's value."""

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _hidden(char: str) -> bool:
    """Characters that do not display as themselves: controls, formats (bidi, zero-width),
    surrogates, private use, unassigned, and separators (every space but U+0020)."""
    if char == " ":
        return False
    return unicodedata.category(char)[0] in "CZ"


def _escape(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def visible(text: str) -> str:
    """``text`` with every character that does not display as itself written as an escape."""
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text  # the common case: nothing to escape
    return "".join(_escape(c) if c == "\\" or _hidden(c) else c for c in text)


def _json_escape(char: str) -> str:
    point = ord(char)
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    point -= 0x10000  # a UTF-16 surrogate pair, as JSON spells characters past the BMP
    return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"


def visible_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON that parses back to the exact value, with hidden characters escaped.

    Outside strings the dumped text holds only printable ASCII and the newlines of ``indent``,
    and json escapes every newline inside a string, so escaping each other hidden character
    only touches strings."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    if text.isascii() and "\x7f" not in text:
        return text
    return "".join(_json_escape(c) if c != "\n" and _hidden(c) else c for c in text)


def effective_state(action: PendingAction, now: float | None = None) -> ApprovalState:
    """A pending action past its expiry is expired, whether or not anyone tried to decide it."""
    now = time.time() if now is None else now
    if action.state is ApprovalState.PENDING and action.expires_at < now:
        return ApprovalState.EXPIRED
    return action.state


def shown_arguments(action: PendingAction) -> dict[str, Any]:
    """The arguments as the approver sees them: exact, but sensitive values masked."""
    arguments: dict[str, Any] = json.loads(action.arguments)
    return {k: MASKED if k in action.sensitive else v for k, v in arguments.items()}


def _when(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def approval_facts(action: PendingAction, now: float | None = None) -> dict[str, Any]:
    """The action as an approver reads it: who, identified or not, what, the checks' warnings,
    why, when, and its state. Strings are as stored; render with ``visible``/``visible_json``."""
    return {
        "id": action.id,
        "state": str(effective_state(action, now)),
        "tool": action.tool,
        "arguments": shown_arguments(action),
        "masked": sorted(action.sensitive),
        "warnings": json.loads(action.warnings),
        "reason": action.reason,
        "principal": action.principal_id,
        "authenticated": action.authenticated,
        "role": action.role,
        "session": action.session_id,
        "created_at": _when(action.created_at),
        "expires_at": _when(action.expires_at),
        "decided_by": action.decided_by,
        "decided_at": _when(action.decided_at),
    }


def _who(action: PendingAction) -> str:
    principal = visible(action.principal_id)
    return principal if action.authenticated else f"{principal} (NOT identified)"


def approval_line(action: PendingAction, now: float | None = None) -> str:
    """One line of a listing: id, state, decider, tool, who, arguments, warnings, expiry."""
    facts = approval_facts(action, now)
    decided = f" by {visible(action.decided_by)}" if action.decided_by else ""
    warned = f"  warnings {visible(', '.join(w['code'] for w in facts['warnings']))}"
    return (
        f"{visible(action.id)}  {facts['state']:<8}{decided}  {visible(action.tool)}  "
        f"for {_who(action)}  {visible_json(facts['arguments'])}"
        f"{warned if facts['warnings'] else ''}  expires {facts['expires_at']}"
    )


def approval_question(action: PendingAction) -> str:
    """What a human is asked: who asks (and whether identified), the tool, the exact arguments that
    will run, the checks' warnings, why, until when. Every attacker-shaped part is escaped."""
    facts = approval_facts(action)
    why = (
        "outside content was read earlier in this conversation"
        if action.reason == Code.TAINTED_CONTEXT
        else "a value in it came from outside content, not from the user"
        if action.reason == Code.UNTRUSTED_VALUE
        else "this action needs a human's approval"
    )
    warnings = "".join(
        f"\nWarning {visible(str(w.get('code')))}: {visible(str(w.get('message')))}"
        for w in facts["warnings"]
    )
    masked = (
        f" ({', '.join(visible(name) for name in facts['masked'])} masked)"
        if facts["masked"]
        else ""
    )
    return (
        f"Approve {visible(action.tool)} for {_who(action)}? It runs once with exactly these "
        f"arguments{masked}:\n{visible_json(facts['arguments'], indent=2)}{warnings}\n"
        f"Why you are asked: {why}. Approval {visible(action.id)}, open until "
        f"{facts['expires_at']}."
    )
