"""Who a session acts for. Authority comes from here and from the host, never from arguments."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The end user or service an agent session acts for."""

    id: str
    """Stable identifier (``CUS-1``); only ever exported as a keyed hash."""
    role: str
    """Selects the allowlist and limits in the policy (``customer``, ``support_agent``)."""
    scopes: frozenset[str] = frozenset()
    """What the session may do (``orders:read``, ``refunds:write``)."""
