"""Adapters for agent frameworks: one module per framework, each an optional extra.

- ``callgate.adapters.pydantic_ai`` (``callgate[pydantic-ai]``)
- ``callgate.adapters.openai_agents`` (``callgate[openai-agents]``)
- ``callgate.adapters.langgraph`` (``callgate[langgraph]``)

Import the module of your framework; this package imports none of them.
"""

from callgate.adapters._common import (
    current_framework_context,
    current_tool_context,
    model_text,
    signature_model,
)

__all__ = ["current_framework_context", "current_tool_context", "model_text", "signature_model"]
