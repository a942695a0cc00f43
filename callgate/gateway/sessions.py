"""Which guard session a downstream request belongs to: its MCP session, or its conversation.

The guard keys taint, loop counts, the validation budget, idempotency and approvals by session, so
two conversations must never share one. A request's session is, first match wins:

1. the conversation id the client sends in the request's ``_meta`` (``CONVERSATION_KEY``), scoped by
   principal (two principals naming the same conversation get two sessions);
2. the MCP session: the stdio connection, or the ``mcp-session-id`` of a streamable HTTP session;
3. for a 2026-07-28 HTTP request, which has no MCP session, one session per principal: writes are
   still deduplicated across its requests, but its conversations share taint and budgets, so such
   clients should send a conversation id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext

__all__ = ["CONVERSATION_KEY", "session_from_meta", "session_of"]

CONVERSATION_KEY = "io.callgate/conversation"
"""The ``_meta`` key of a request's conversation id (a string of at most 200 characters)."""


def session_of(ctx: ServerRequestContext[Any, Any], principal: str, transport: str) -> str:
    """The guard session id of ``ctx``: its conversation's, else ``transport``'s (see above)."""
    return session_from_meta(ctx.meta, principal, transport)


def session_from_meta(meta: Mapping[str, Any] | None, principal: str, transport: str) -> str:
    """The guard session id of a request whose ``_meta`` is ``meta`` (see above)."""
    conversation = (meta or {}).get(CONVERSATION_KEY)
    if isinstance(conversation, str) and 0 < len(conversation) <= 200:
        return f"conv:{principal}:{conversation}"
    return transport
