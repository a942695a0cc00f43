"""Provider formats, generated from the same argument models the guard validates with.

One module per provider, plain dicts exactly as each API sends and accepts them (no SDKs):

- ``openai``: Chat Completions and Responses tools (strict by default), tool calls, tool results.
- ``anthropic``: Messages API tools, ``tool_use`` blocks, ``tool_result`` blocks.
- ``mcp``: ``tools/list`` entries, ``tools/call`` requests and responses.

Parsers return ``ProposedCall`` values and never raise on a malformed tool call written by the model
(the guard answers it); they raise ``ValueError`` only when handed something that is not a provider
object at all. See ``guard.providers.call``.
"""

from guard.providers.anthropic import (
    anthropic_tool_results_message,
    anthropic_tools,
    parse_anthropic,
    render_anthropic,
)
from guard.providers.call import ProposedCall
from guard.providers.mcp import mcp_tools, parse_mcp, render_mcp
from guard.providers.openai import (
    openai_chat_tools,
    openai_responses_tools,
    parse_openai_chat,
    parse_openai_responses,
    render_openai_chat,
    render_openai_responses,
)

__all__ = [
    "ProposedCall",
    "anthropic_tool_results_message",
    "anthropic_tools",
    "mcp_tools",
    "openai_chat_tools",
    "openai_responses_tools",
    "parse_anthropic",
    "parse_mcp",
    "parse_openai_chat",
    "parse_openai_responses",
    "render_anthropic",
    "render_mcp",
    "render_openai_chat",
    "render_openai_responses",
]
