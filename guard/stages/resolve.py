"""Stage 1: the tool exists, this principal's role may call it, and the session has its scope."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["ResolveStage"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ResolveStage:
    """Unknown tools are answered with the names the model may use, and only those.

    Before anyone is identified (an anonymous principal), a tool outside the role's allowlist is
    AUTH_REQUIRED, naming the authenticating tools the role may call, rather than TOOL_NOT_ALLOWED."""

    env: Env
    name: str = "resolve"
    _available: dict[str, list[str]] = field(default_factory=dict, init=False, repr=False)

    def __call__(self, call: Call) -> ToolResult | None:
        spec = self.env.registry.get(call.tool)
        role = self.env.policy.role(call.principal.role)
        allowed = role.tools if role else frozenset()
        if spec is None:
            names = self._names(call.principal.role, allowed)
            listed = ", ".join(names) if names else "none"
            return reject(
                call,
                Code.UNKNOWN_TOOL,
                f"There is no tool named {call.tool[:60]!r}. Tools you can use: {listed}.",
                data={"available": names},
            )
        if spec.name not in allowed:
            if not call.principal.authenticated and (
                first := [name for name in self.env.registry.authenticating if name in allowed]
            ):
                return reject(
                    call,
                    Code.AUTH_REQUIRED,
                    f"{spec.name} needs to know who the user is, and nobody is identified yet. "
                    f"Identify the user first with {' or '.join(first)}, then call {spec.name} again.",
                    data={"call_first": first},
                )
            return reject(
                call,
                Code.TOOL_NOT_ALLOWED,
                f"The tool {spec.name!r} is not available in this conversation. Do not retry it; "
                "tell the user you cannot do this here.",
            )
        if spec.scope is not None and spec.scope not in call.principal.scopes:
            return reject(
                call,
                Code.PERMISSION_DENIED,
                f"This session is not permitted to use {spec.name!r}. Do not retry it.",
            )
        call.spec = spec
        return None

    def _names(self, role: str, allowed: frozenset[str]) -> list[str]:
        names = self._available.get(role)
        if names is None:
            names = sorted(name for name in allowed if name in self.env.registry)
            self._available[role] = names
        return names
