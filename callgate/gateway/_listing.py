"""``tools/list`` on the wire as the upstreams list it: ``execution`` kept on every protocol version.

The SDK's server shapes each result by the negotiated version's schema, dropping what that schema
lacks. ``execution`` (``taskSupport``) is in 2025-11-25 only, so a 2026-07-28 client of the gateway
lost it on every tool of the reference servers, which speak 2025-11-25 to the gateway. The field
only informs: the gateway declares no ``tasks`` capability, so per the spec no client sends it
task-augmented calls whatever a tool says. ``KeepExecution`` runs after that shaping and puts the
upstream's ``execution`` back, unchanged, on each tool that had one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["KeepExecution"]


class KeepExecution:
    """Server middleware: each listed tool's ``execution`` as its upstream listed it."""

    def __init__(self, listed: Callable[[str], types.Tool | None]) -> None:
        self._listed = listed
        """The definition listed under an exposed name (None for a name the gateway lacks)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method != "tools/list" or not isinstance(result, dict):
            return result
        for tool in result.get("tools") or ():
            if not isinstance(tool, dict) or "execution" in tool:
                continue
            definition = self._listed(str(tool.get("name")))
            if definition is not None and definition.execution is not None:
                tool["execution"] = definition.execution.model_dump(
                    by_alias=True, mode="json", exclude_none=True
                )
        return result
