"""OpenAI: tool definitions, tool calls and tool results for Chat Completions and the Responses API.

Plain dicts exactly as the HTTP API sends and accepts them; no SDK. Tools are declared in strict
mode by default (Structured Outputs: the model's arguments are constrained to the schema while it
generates them). A tool whose schema has no faithful strict form is declared with ``strict: false``
and its plain schema instead; see ``guard.providers._schema`` for the conversion. The guard
validates the arguments either way: strict mode makes valid calls likelier, not safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from guard.providers._schema import iter_specs, neutral_schema, strict_schema
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
    "openai_chat_tools",
    "openai_responses_tools",
    "parse_openai_chat",
    "parse_openai_responses",
    "render_openai_chat",
    "render_openai_responses",
]


def openai_chat_tools(
    specs: Iterable[ToolSpec] | Mapping[str, ToolSpec], *, strict: bool = True
) -> list[dict[str, Any]]:
    """The ``tools`` parameter of a Chat Completions request.

    ``[{"type": "function", "function": {"name", "description", "parameters", "strict"}}]``
    """
    return [{"type": "function", "function": _function(spec, strict)} for spec in iter_specs(specs)]


def openai_responses_tools(
    specs: Iterable[ToolSpec] | Mapping[str, ToolSpec], *, strict: bool = True
) -> list[dict[str, Any]]:
    """The ``tools`` parameter of a Responses API request.

    ``[{"type": "function", "name", "description", "parameters", "strict"}]``. ``strict`` is always
    written out, because the Responses API assumes true when it is missing.
    """
    return [{"type": "function", **_function(spec, strict)} for spec in iter_specs(specs)]


def parse_openai_chat(
    message_or_tool_calls: Mapping[str, Any] | Sequence[Mapping[str, Any]],
) -> list[ProposedCall]:
    """The tool calls of a Chat Completions assistant message (``choices[0].message``).

    Accepts the message or its ``tool_calls`` list; a message without tool calls gives ``[]``.
    Every entry becomes a call, so every call id gets an answer. Raises ``ValueError`` only when the
    argument is not an assistant message or a list of tool-call objects.
    """
    tool_calls: Any = message_or_tool_calls
    if isinstance(message_or_tool_calls, Mapping):
        message = message_or_tool_calls
        if "tool_calls" not in message and message.get("role") != "assistant":
            raise ValueError("expected an assistant message (choices[0].message) or its tool_calls")
        tool_calls = message.get("tool_calls") or []
    return [_chat_call(item) for item in mappings(tool_calls, "tool_calls")]


def parse_openai_responses(
    output_items: Sequence[Mapping[str, Any]] | Mapping[str, Any],
) -> list[ProposedCall]:
    """The function calls in a Responses API ``output`` list (or the response that holds it).

    Only items of type ``function_call`` are calls; messages, reasoning and hosted-tool items are
    skipped. Raises ``ValueError`` only when the argument is not an output list or a response.
    """
    items: Any = output_items
    if isinstance(output_items, Mapping):
        if "output" not in output_items:
            raise ValueError("expected a Responses API output list or a response with 'output'")
        items = output_items["output"]
    return [
        ProposedCall(
            name=name_text(item.get("name")),
            arguments=arguments_text(item.get("arguments")),
            call_id=optional_id(item.get("call_id")),
            provider="openai_responses",
        )
        for item in mappings(items, "output")
        if item.get("type") == "function_call"
    ]


def render_openai_chat(result: ToolResult, call_id: str | None = None) -> dict[str, Any]:
    """The ``tool`` message that answers one call (``call_id`` defaults to ``result.call_id``)."""
    return {
        "role": "tool",
        "tool_call_id": answer_id(result, call_id),
        "content": result_text(result),
    }


def render_openai_responses(result: ToolResult, call_id: str | None = None) -> dict[str, Any]:
    """The ``function_call_output`` input item that answers one call (default id: the result's)."""
    return {
        "type": "function_call_output",
        "call_id": answer_id(result, call_id),
        "output": result_text(result),
    }


def _function(spec: ToolSpec, strict: bool) -> dict[str, Any]:
    """Name, description, parameters and the strict flag the parameters actually satisfy."""
    parameters = strict_schema(spec) if strict else None
    return {
        "name": spec.name,
        "description": spec.model_description,
        "parameters": parameters if parameters is not None else neutral_schema(spec),
        "strict": parameters is not None,
    }


def _chat_call(item: Mapping[str, Any]) -> ProposedCall:
    """One ``tool_calls`` entry: ``{"id", "type", "function": {"name", "arguments"}}``."""
    function = item.get("function")
    if not isinstance(function, Mapping):
        function = {}
    return ProposedCall(
        name=name_text(function.get("name")),
        arguments=arguments_text(function.get("arguments")),
        call_id=optional_id(item.get("id")),
        provider="openai_chat",
    )
