"""The approval questions this gateway asked through a client, each under a single-use nonce.

A 2026-07-28 client answers an ``InputRequiredResult`` by retrying the call with the answer and the
``requestState`` it was given. That state comes back from the client, so it is attacker-controlled:
the approval id is in the pending result the model reads, and a client could resend it with its own
accepting answer. So the state is a fresh random nonce, never the approval id, and an answer counts
only if its nonce names a question this process asked, in the same session, for the same principal
and tool, not yet answered and not expired. The nonce is spent on first use, whatever the answer.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

__all__ = ["Question", "Questions"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Question:
    """One question asked: which approval it decides and who may answer it."""

    approval_id: str
    session_id: str
    principal: str
    tool: str
    expires_at: float


class Questions:
    """Open questions by nonce, in this process's memory: a restart forgets them (answers then go
    to ``callgate approvals``), which is the safe direction."""

    def __init__(self) -> None:
        self._open: dict[str, Question] = {}
        self._lock = threading.Lock()

    def ask(self, question: Question, *, now: float) -> str:
        """Record ``question``; the nonce to send as ``requestState``."""
        nonce = "q_" + secrets.token_urlsafe(24)
        with self._lock:
            for stale in [n for n, q in self._open.items() if q.expires_at < now]:
                del self._open[stale]
            self._open[nonce] = question
        return nonce

    def answer(
        self, nonce: str, *, session_id: str, principal: str, tool: str, now: float
    ) -> Question | None:
        """The question ``nonce`` names if this answer may decide it; spends the nonce either way."""
        with self._lock:
            question = self._open.pop(nonce, None)
        if question is None or question.expires_at < now:
            return None
        if (question.session_id, question.principal, question.tool) != (
            session_id,
            principal,
            tool,
        ):
            return None
        return question

    def __len__(self) -> int:
        return len(self._open)
