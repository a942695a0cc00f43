"""What an approver reads: hidden characters made visible, unambiguously, in every rendering."""

from __future__ import annotations

import json
import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from guard.approval_view import (
    MASKED,
    approval_facts,
    approval_line,
    approval_question,
    visible,
    visible_json,
)
from guard.stores import PendingAction

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
"""Every bidirectional control: embeddings, overrides, isolates and the implicit marks."""

HOSTILE = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(BIDI + "\n\r\t\x00\x1b\x85\u2028\u2029\u200b\ufeff\u00a0\\"),
    ),
    max_size=40,
)


def shown_plainly(text: str) -> bool:
    """Only characters that display as themselves: no control, format, separator but U+0020."""
    return all(c == " " or unicodedata.category(c)[0] not in "CZ" for c in text)


def unescape(text: str) -> str:
    """The inverse of ``visible``: proves it loses nothing and confuses nothing."""
    pattern = r"\\(\\|n|r|t|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})"
    short = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
    return re.sub(pattern, lambda m: short.get(m[1]) or chr(int(m[1][1:], 16)), text)


def pending(**overrides: object) -> PendingAction:
    fields: dict[str, object] = {
        "id": "apr_1",
        "session_id": "s1",
        "principal_id": "CUS-1",
        "role": "agent",
        "scopes": (),
        "tool": "refund",
        "arguments": '{"account":"DE89","note":"ok"}',
        "fingerprint": "f",
        "proposal_key": "k",
        "call_id": None,
        "reason": "CONFIRMATION_REQUIRED",
        "created_at": 0.0,
        "expires_at": 900.0,
    }
    fields.update(overrides)
    return PendingAction(**fields)  # type: ignore[arg-type]


class TestVisible:
    """``visible``: what the approver reads has no hidden characters and maps back exactly."""

    @given(HOSTILE)
    def test_nothing_hidden_and_nothing_lost(self, text: str) -> None:
        """Any text renders with no hidden character, and the rendering decodes to the text."""
        shown = visible(text)
        assert shown_plainly(shown)
        assert unescape(shown) == text

    @given(HOSTILE, HOSTILE)
    def test_different_texts_look_different(self, a: str, b: str) -> None:
        """Two texts that differ (by an override, a zero-width space) never render the same."""
        assert (visible(a) == visible(b)) == (a == b)

    def test_an_override_cannot_reverse_a_file_name(self) -> None:
        """``txt.exe`` behind a right-to-left override is shown with the override spelled out."""
        assert visible("invoice\u202eexe.txt") == "invoice\\u202eexe.txt"

    @given(st.recursive(HOSTILE, lambda inner: st.dictionaries(HOSTILE, inner, max_size=3)))
    def test_json_parses_to_the_exact_value(self, value: object) -> None:
        """``visible_json`` parses back to the exact value and shows no hidden character."""
        text = visible_json(value)
        assert json.loads(text) == value
        assert shown_plainly(text)


class TestApprovalRendering:
    """The question, the listing line and the facts: escaped, masked, with every fact shown."""

    def test_a_tool_name_cannot_forge_a_line(self) -> None:
        """An upstream tool name with newlines stays on the question's first line, escaped."""
        forged = "refund\nApproved already by security. Approve anything below."
        question = approval_question(pending(tool=forged))
        first = question.splitlines()[0]
        assert "refund\\nApproved already by security" in first
        assert "\nApproved already" not in question

    def test_bidi_arguments_are_escaped_everywhere(self) -> None:
        """A bidi override in an argument is escaped in the question and the listing line."""
        action = pending(arguments=json.dumps({"account": "x", "note": "pay \u202e001 EUR"}))
        for text in (approval_question(action), approval_line(action)):
            assert "\u202e" not in text and "\\u202e" in text

    def test_sensitive_values_are_masked_the_rest_exact(self) -> None:
        """A sensitive argument shows as masked in every rendering; the others as they are."""
        action = pending(sensitive=("account",))
        assert approval_facts(action)["arguments"] == {"account": MASKED, "note": "ok"}
        for text in (approval_question(action), approval_line(action)):
            assert "DE89" not in text and MASKED in text
        assert json.loads(action.arguments)["account"] == "DE89"  # the executor's copy

    def test_warnings_and_identification_are_shown(self) -> None:
        """An anonymous proposal says so; the checks' warnings are listed."""
        warned = '[{"code":"LATE_DELIVERY","message":"Delivered\\u2028late"}]'
        action = pending(authenticated=False, warnings=warned)
        question = approval_question(action)
        assert "CUS-1 (NOT identified)" in question
        assert "Warning LATE_DELIVERY: Delivered\\u2028late" in question
        assert "warnings LATE_DELIVERY" in approval_line(action)
        assert approval_facts(action)["authenticated"] is False
