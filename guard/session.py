"""Who a session acts for. Authority comes from here and from the host, never from arguments."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "Principal"]

ANONYMOUS = "anonymous"
"""The id of a principal nobody has identified yet."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The end user or service an agent session acts for."""

    id: str
    """Stable identifier (``CUS-1``); only ever exported as a keyed hash."""
    role: str
    """Selects the allowlist and limits in the policy (``customer``, ``support_agent``)."""
    scopes: frozenset[str] = frozenset()
    """What the session may do (``orders:read``, ``refunds:write``)."""
    authenticated: bool = True
    """False until the user is identified: tools outside this role's allowlist then answer
    AUTH_REQUIRED (identify the user first) instead of TOOL_NOT_ALLOWED."""

    @classmethod
    def anonymous(cls, role: str = ANONYMOUS, scopes: frozenset[str] = frozenset()) -> Principal:
        """A session that starts before anyone is identified (a support chat's first message)."""
        return cls(id=ANONYMOUS, role=role, scopes=scopes, authenticated=False)
