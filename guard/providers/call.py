"""The provider-neutral form of one tool call the model proposed.

Every parser in ``guard.providers`` turns a provider's message into a list of ``ProposedCall`` and
every renderer turns a ``ToolResult`` back into that provider's tool-result shape.

How parsers treat malformed input: a provider object has two parts.

- The container (an assistant message, a Responses ``output`` list, a JSON-RPC request) comes from
  the provider or the host. If it is not a provider object at all, the parser raises ``ValueError``:
  that is a bug in the caller, and no call id exists to answer to.
- The fields of one tool call (name, arguments, id) are written by the model. Their problems are
  values for the guard to judge, never exceptions, so the model gets an answer it can act on: a
  missing name becomes ``""`` (UNKNOWN_TOOL), missing or undecodable arguments become ``""``
  (INVALID_JSON), arguments that arrive as a JSON value instead of text are dumped to text and left
  to the parse stage (INVALID_JSON unless they are an object).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ProposedCall"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProposedCall:
    """One tool call as the model proposed it, before the guard has looked at it."""

    name: str
    """The tool name as the model sent it (``""`` when the provider object had none)."""
    arguments: str
    """The arguments as JSON text, exactly as the model sent them; ``json.dumps`` of the value when
    a provider sends an object (Anthropic ``input``, MCP ``arguments``); ``""`` when there were
    none."""
    call_id: str | None
    """The provider's id for the call, which the tool result must quote; None when it had none."""
    provider: str
    """Where it came from: ``openai_chat``, ``openai_responses``, ``anthropic`` or ``mcp``."""
