"""The gateway's YAML config, read into frozen dataclasses; a malformed file is refused with its line.

Every mapping read from the file remembers the line of each key, so a refusal reads
``gateway.yaml:14: upstreams.shop.tools.refund.risk: expected one of low, medium, high, got 'huge'``.
Unknown keys are refused too: a misspelt ``confrim_at`` would otherwise be a silently ignored rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from guard import Effect, Risk

__all__ = [
    "AmountLimitConfig",
    "ConfigError",
    "GatewayConfig",
    "HttpConfig",
    "PolicyConfig",
    "PrincipalConfig",
    "RateConfig",
    "TelemetryConfig",
    "TokenConfig",
    "ToolConfig",
    "UpstreamConfig",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """The config cannot work; the message names the file, the line and the reason."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RateConfig:
    """At most ``calls`` per ``seconds``, per principal and tool (fixed window)."""

    calls: int
    seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class AmountLimitConfig:
    """Caps an integer argument per request and per principal per UTC day (``guard.AmountLimit``)."""

    field: str
    per_request: int | None = None
    per_day: int | None = None
    group_by: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolConfig:
    """The policy of one upstream tool. Unset fields come from the tool's MCP annotations."""

    effect: Effect | None = None
    """read or write; default: read when ``readOnlyHint`` is true, else write."""
    risk: Risk | None = None
    """low, medium or high; default: high for a ``destructiveHint`` write, medium for other writes."""
    scope: str | None = None
    """The scope a principal needs to call it."""
    untrusted_output: bool = False
    """Its results carry outside text: the session is tainted after it runs."""
    result_fields: tuple[str, ...] | None = None
    """The only fields of its structured result passed back; None passes the whole result."""
    rate_limit: RateConfig | None = None
    """Calls per window, per principal."""
    daily_limit: int | None = None
    """Calls per principal per UTC day that reach the upstream."""
    amount_limit: AmountLimitConfig | None = None
    """Caps one integer argument."""
    strict: bool = True
    """False relaxes validation: unknown fields dropped and values coerced."""
    timeout: float | None = None
    """Seconds per attempt; default: the upstream's."""
    idempotent: bool | None = None
    """The upstream deduplicates repeated writes; default: ``idempotentHint``."""
    hidden: bool = False
    """Never listed nor callable, whoever asks."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamConfig:
    """One upstream MCP server, reached over stdio (``command``) or streamable HTTP (``url``)."""

    name: str
    command: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    namespace: str | None = None
    """Prefix for its tool names downstream (``shop`` gives ``shop_get_order``)."""
    timeout: float = 10.0
    """Seconds per tool call attempt."""
    connect_timeout: float = 15.0
    """Seconds to connect and list tools."""
    max_result_bytes: int = 1_000_000
    """Larger results are refused (a typed error), never passed on."""
    tools: Mapping[str, ToolConfig] = field(default_factory=dict)

    def exposed(self, tool: str) -> str:
        """The downstream name of upstream tool ``tool``."""
        return f"{self.namespace}_{tool}" if self.namespace else tool


@dataclass(frozen=True, kw_only=True, slots=True)
class PrincipalConfig:
    """Who a downstream connection acts for, and what it may call."""

    name: str
    tools: tuple[str, ...]
    """Downstream tool names it may call, or ``*`` for all."""
    scopes: frozenset[str] = frozenset()
    role: str | None = None
    """The policy role; default: the principal's name."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenConfig:
    """A bearer token for the HTTP transport and the principal it stands for."""

    token: str
    principal: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HttpConfig:
    host: str = "127.0.0.1"
    port: int = 8765
    path: str = "/mcp"
    tokens: tuple[TokenConfig, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyConfig:
    """Deployment-wide limits (``guard.Policy``); MCP has no turns, so one turn is the session."""

    max_steps_per_session: int = 1000
    rate_limit: RateConfig | None = None
    max_invalid_in_a_row: int = 3
    max_identical_calls: int = 3
    confirm_at: Risk = Risk.HIGH
    confirmation_ttl: float = 900.0
    taint_requires_confirmation: bool = True
    elicitation_timeout: float = 300.0
    """Seconds a human has to answer an elicitation before the call returns the pending result."""
    shadow: bool | tuple[str, ...] = False
    """Shadow mode (``guard.Guard(shadow=...)``): true, or downstream tool names. Every stage runs
    and records what it would have decided, nothing is enforced beyond malformed calls."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TelemetryConfig:
    service_name: str = "callgate-gateway"
    trail: bool = True
    trail_dir: str | None = None
    otlp_endpoint: str | None = None
    otlp_protocol: str = "grpc"


@dataclass(frozen=True, kw_only=True, slots=True)
class GatewayConfig:
    """The whole file."""

    path: Path | None
    upstreams: tuple[UpstreamConfig, ...]
    principals: Mapping[str, PrincipalConfig]
    stdio_principal: str | None = None
    http: HttpConfig = field(default_factory=HttpConfig)
    store: str | None = None
    """A SQLite path or a ``redis://`` URL; None keeps everything in memory."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read and check ``path``; raises ``ConfigError`` with the line and reason."""
    source = Path(path)
    try:
        text = source.read_text()
    except OSError as err:
        raise ConfigError(f"{source}: cannot read: {err.strerror}") from err
    return parse_config(text, source)


def parse_config(text: str, source: Path | None = None) -> GatewayConfig:
    """Check config ``text``; relative paths in it resolve against ``source``'s folder."""
    from callgate.gateway._yaml import read_config  # the reader imports these dataclasses

    return read_config(text, source)
