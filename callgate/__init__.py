"""callgate's front door: the names a user needs first, from one import.

::

    from callgate import Guard, Principal, tool, configure

The root packages stay the full API (``guard``, ``guard.stores``, ``guard.providers``,
``telemetry``, ``analytics``, ``dashboards``); this module re-exports the first names of the two a
guard's process uses, and loads nothing until a name is used (PEP 562), so ``callgate --help`` and
``python -m callgate`` pay for the guard or OpenTelemetry only when a command needs them. Every name
here needs only the core install (``pip install callgate``).
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from guard import (
        Code,
        DomainCode,
        Effect,
        Guard,
        Outcome,
        Policy,
        Principal,
        Risk,
        RolePolicy,
        Session,
        ToolContext,
        ToolResult,
        TransientError,
        tool,
    )
    from guard.providers import (
        anthropic_tools,
        openai_chat_tools,
        parse_anthropic,
        parse_openai_chat,
        render_anthropic,
        render_openai_chat,
    )
    from guard.shop import build_shop
    from guard.stores import open_sqlite_stores
    from telemetry.setup import Telemetry, configure

__all__ = [
    "Code",
    "DomainCode",
    "Effect",
    "Guard",
    "Outcome",
    "Policy",
    "Principal",
    "Risk",
    "RolePolicy",
    "Session",
    "Telemetry",
    "ToolContext",
    "ToolResult",
    "TransientError",
    "anthropic_tools",
    "build_shop",
    "configure",
    "open_sqlite_stores",
    "openai_chat_tools",
    "parse_anthropic",
    "parse_openai_chat",
    "render_anthropic",
    "render_openai_chat",
    "tool",
]

_GUARD = (
    "Code",
    "DomainCode",
    "Effect",
    "Guard",
    "Outcome",
    "Policy",
    "Principal",
    "Risk",
    "RolePolicy",
    "Session",
    "ToolContext",
    "ToolResult",
    "TransientError",
    "tool",
)
_PROVIDERS = (
    "anthropic_tools",
    "openai_chat_tools",
    "parse_anthropic",
    "parse_openai_chat",
    "render_anthropic",
    "render_openai_chat",
)
_HOME: dict[str, str] = {
    **dict.fromkeys(_GUARD, "guard"),
    **dict.fromkeys(_PROVIDERS, "guard.providers"),
    "build_shop": "guard.shop",
    "open_sqlite_stores": "guard.stores",
    "Telemetry": "telemetry.setup",
    "configure": "telemetry.setup",
}
"""Where each name lives: its root package is the full API around it."""


def __getattr__(name: str) -> typing.Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'callgate' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
