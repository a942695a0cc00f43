"""Model Context Protocol: ``tools/list`` entries, ``tools/call`` requests and their responses.

Plain JSON-RPC 2.0 dicts as an MCP server reads and writes them. The annotations are hints for the
client (which may, for instance, ask the user before a destructive tool): the guard enforces the
real policy whatever the client does with them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from guard.providers._schema import iter_specs, neutral_schema
from guard.providers._wire import arguments_text, name_text, optional_id, result_payload
from guard.providers.call import ProposedCall
from guard.registry import Effect, Risk, ToolSpec
from guard.result import ToolResult

__all__ = ["mcp_tools", "parse_mcp", "render_mcp"]


def mcp_tools(specs: Iterable[ToolSpec] | Mapping[str, ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools`` of a ``tools/list`` result: name, description, inputSchema and annotations.

    - ``readOnlyHint``: the tool only reads (``Effect.READ``).
    - ``destructiveHint``: a write whose risk is above LOW (a refund cannot be taken back); a
      low-risk write counts as additive. False for reads, where MCP ignores it.
    - ``idempotentHint``: repeating the call has no further effect: true for reads, and for writes
      whose backend deduplicates by idempotency key (``idempotent_backend``).
    """
    return [
        {
            "name": spec.name,
            "description": spec.model_description,
            "inputSchema": neutral_schema(spec),
            "annotations": {
                "readOnlyHint": spec.effect is Effect.READ,
                "destructiveHint": spec.effect is Effect.WRITE and spec.risk > Risk.LOW,
                "idempotentHint": spec.effect is Effect.READ or spec.idempotent_backend,
            },
        }
        for spec in iter_specs(specs)
    ]


def parse_mcp(request: Mapping[str, Any]) -> ProposedCall:
    """The call in a JSON-RPC ``tools/call`` request; ``call_id`` is the request id as text.

    ``params.arguments`` is optional in MCP (a tool without parameters), so a missing one reads as
    ``"{}"``; an explicit null reads as ``""`` and a non-object is dumped to text, both for the
    parse stage to reject.
    Raises ``ValueError`` when the request is not a ``tools/call`` request with ``params``.
    """
    if not isinstance(request, Mapping) or request.get("method") != "tools/call":
        raise ValueError("expected a JSON-RPC tools/call request")
    params = request.get("params")
    if not isinstance(params, Mapping):
        raise ValueError("a tools/call request needs params with the tool's name and arguments")
    return ProposedCall(
        name=name_text(params.get("name")),
        arguments=arguments_text(params["arguments"]) if "arguments" in params else "{}",
        call_id=optional_id(request.get("id")),
        provider="mcp",
    )


def render_mcp(result: ToolResult, request_id: str | int) -> dict[str, Any]:
    """The JSON-RPC response to a ``tools/call`` request.

    The payload goes both as text content (for clients that read only ``content``) and as
    ``structuredContent``. A rejected call is a tool error (``isError``), not a JSON-RPC error: the
    model must see the reason to recover.
    """
    payload = result_payload(result)
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "content": [{"type": "text", "text": json.dumps(payload, ensure_ascii=False)}],
            "structuredContent": payload,
            "isError": not result.ok,
        },
    }
