"""The MCP gateway: any MCP server's tools behind the guard (needs the ``mcp`` extra).

``callgate gateway --config gateway.yaml`` connects to the upstream servers the config names, and
serves their tools downstream as one MCP server, every call through the guard's pipeline.

The names below are imported on first use, so ``callgate`` runs without the ``mcp`` extra installed
(only the gateway commands then fail, saying what to install).
"""

from __future__ import annotations

from importlib import import_module as _import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from callgate.gateway.config import ConfigError, GatewayConfig, load_config, parse_config
    from callgate.gateway.gateway import Gateway, GatewayError, Stores
    from callgate.gateway.pins import definition_hash
    from callgate.gateway.run import running, serve_http, serve_stdio
    from callgate.gateway.schema import UnsupportedSchema, model_from_schema

__all__ = [
    "ConfigError",
    "Gateway",
    "GatewayConfig",
    "GatewayError",
    "Stores",
    "UnsupportedSchema",
    "definition_hash",
    "load_config",
    "model_from_schema",
    "parse_config",
    "running",
    "serve_http",
    "serve_stdio",
]

_HOMES = {
    "ConfigError": "config",
    "GatewayConfig": "config",
    "load_config": "config",
    "parse_config": "config",
    "Gateway": "gateway",
    "GatewayError": "gateway",
    "Stores": "gateway",
    "definition_hash": "pins",
    "running": "run",
    "serve_http": "run",
    "serve_stdio": "run",
    "UnsupportedSchema": "schema",
    "model_from_schema": "schema",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'callgate.gateway' has no attribute {name!r}")
    return getattr(_import_module(f"callgate.gateway.{home}"), name)
