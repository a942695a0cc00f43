"""Anthropic Messages API: tool definitions, ``tool_use`` blocks and ``tool_result`` blocks.

Plain dicts exactly as the HTTP API sends and accepts them; no SDK. Anthropic sends a call's
arguments as a JSON object (``input``), not as text; the parser dumps it to text so the guard's
parse and schema stages treat every provider alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from guard.providers._schema import iter_specs, neutral_schema
from guard.providers._wire import (
    answer_id,
    arguments_text,
    mappings,
    name_text,
    optional_id,
    result_text,
)
from guard.providers.call import ProposedCall
from guard.registry import ToolSpec
from guard.result import ToolResult

__all__ = [
    "anthropic_tool_results_message",
    "anthropic_tools",
    "parse_anthropic",
    "render_anthropic",
]


def anthropic_tools(specs: Iterable[ToolSpec] | Mapping[str, ToolSpec]) -> list[dict[str, Any]]:
    """The ``tools`` of a Messages request: ``[{"name", "description", "input_schema"}]``."""
    return [
        {
            "name": spec.name,
            "description": spec.model_description,
            "input_schema": neutral_schema(spec),
        }
        for spec in iter_specs(specs)
    ]


def parse_anthropic(
    message_or_content: Mapping[str, Any] | Sequence[Mapping[str, Any]],
) -> list[ProposedCall]:
    """The ``tool_use`` blocks of a Messages API response (or of its ``content`` list).

    Text, thinking and server-tool blocks are skipped. A block without ``input`` gets arguments
    ``""`` (INVALID_JSON); any other ``input`` is dumped to JSON text for the parse stage to judge.
    Raises ``ValueError`` only when the argument is not a message or a list of content blocks.
    """
    content: Any = message_or_content
    if isinstance(message_or_content, Mapping):
        if "content" not in message_or_content:
            raise ValueError("expected a Messages API response or its content list")
        content = message_or_content["content"]
        if isinstance(content, str):  # a message may carry plain text instead of blocks
            return []
    return [
        ProposedCall(
            name=name_text(block.get("name")),
            arguments=arguments_text(block.get("input")),
            call_id=optional_id(block.get("id")),
            provider="anthropic",
        )
        for block in mappings(content, "content")
        if block.get("type") == "tool_use"
    ]


def render_anthropic(result: ToolResult, call_id: str | None = None) -> dict[str, Any]:
    """The ``tool_result`` block that answers one ``tool_use`` (default id: ``result.call_id``)."""
    return {
        "type": "tool_result",
        "tool_use_id": answer_id(result, call_id),
        "content": result_text(result),
        "is_error": not result.ok,
    }


def anthropic_tool_results_message(results: Iterable[ToolResult]) -> dict[str, Any]:
    """The user message that answers every ``tool_use`` of the previous assistant turn.

    Each result quotes its own ``call_id``; Anthropic wants all results of a turn in one message.
    """
    return {"role": "user", "content": [render_anthropic(result) for result in results]}
