"""Reading the config's YAML with the line of every key, and checking each section.

Every mapping read from the file remembers the line of each key, so a refusal names it; unknown keys
are refused, never ignored. ``callgate.gateway.config`` holds the dataclasses this fills in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from callgate.gateway.config import (
    AmountLimitConfig,
    ConfigError,
    GatewayConfig,
    HttpConfig,
    PolicyConfig,
    PrincipalConfig,
    RateConfig,
    TelemetryConfig,
    TokenConfig,
    ToolConfig,
    UpstreamConfig,
)
from guard import Effect, Risk

__all__ = ["read_config"]


def read_config(text: str, source: Path | None) -> GatewayConfig:
    """Check config ``text``; relative paths in it resolve against ``source``'s folder."""
    label = str(source) if source else "<config>"
    try:
        data = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{label}{line}: not valid YAML: {problem}") from err
    if not isinstance(data, _Map):
        raise ConfigError(f"{label}:1: the config must be a mapping")
    return _Reader(label, source.parent if source else Path.cwd()).config(data)


class _Map(dict[str, Any]):
    """A mapping that remembers its own line and the line of each key."""

    line: int = 0
    lines: dict[str, int]


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> _Map:  # type: ignore[override]
        mapping = _Map()
        mapping.line = node.start_mark.line + 1
        mapping.lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(
                    None, None, f"keys must be strings, got {key!r}", key_node.start_mark
                )
            if key in mapping:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            mapping[key] = self.construct_object(value_node, deep=True)
            mapping.lines[key] = key_node.start_mark.line + 1
        return mapping


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _LineLoader.construct_mapping,
)

_RISKS = {"low": Risk.LOW, "medium": Risk.MEDIUM, "high": Risk.HIGH}


class _Reader:
    """Reads each section; every refusal carries ``file:line: path: reason``."""

    def __init__(self, label: str, base: Path) -> None:
        self.label = label
        self.base = base

    def fail(self, where: _Map, key: str | None, path: str, reason: str) -> ConfigError:
        line = where.lines.get(key, where.line) if key is not None else where.line
        return ConfigError(f"{self.label}:{line}: {path}: {reason}")

    def section(self, parent: _Map, key: str, path: str, allowed: set[str]) -> _Map:
        value = parent.get(key)
        if value is None:
            value = _Map()
            value.line, value.lines = parent.lines.get(key, parent.line), {}
        if not isinstance(value, _Map):
            raise self.fail(parent, key, path, f"expected a mapping, got {_kind(value)}")
        self.only(value, path, allowed)
        return value

    def only(self, data: _Map, path: str, allowed: set[str]) -> None:
        for key in data:
            if key not in allowed:
                raise self.fail(
                    data,
                    key,
                    f"{path}.{key}" if path else key,
                    f"unknown key (expected one of {', '.join(sorted(allowed))})",
                )

    def get(
        self, data: _Map, key: str, path: str, kind: type | tuple[type, ...], default: Any
    ) -> Any:
        if key not in data or data[key] is None:
            return default
        value = data[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.fail(data, key, path, f"expected {_names(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise self.fail(
                data, key, path, f"expected {_names(kind)}, got {_kind(value)} {value!r}"
            )
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 0:
            raise self.fail(data, key, path, f"must not be negative, got {value!r}")
        return value

    def strings(self, data: _Map, key: str, path: str) -> tuple[str, ...] | None:
        value = data.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(data, key, path, "expected a list of strings")
        return tuple(value)

    def config(self, data: _Map) -> GatewayConfig:
        self.only(data, "", {"upstreams", "principals", "serve", "store", "policy", "telemetry"})
        store = self.get(data, "store", "store", str, None)
        if store is not None and not store.startswith(("redis://", "rediss://", "unix://")):
            store = str((self.base / store).resolve()) if not os.path.isabs(store) else store
        upstreams_data = self.section(
            data, "upstreams", "upstreams", set(data.get("upstreams") or ())
        )
        if not upstreams_data:
            raise self.fail(
                data,
                "upstreams" if "upstreams" in data else None,
                "upstreams",
                "at least one upstream is required",
            )
        upstreams = tuple(self.upstream(upstreams_data, name) for name in upstreams_data)
        exposed: dict[str, str] = {}
        for upstream in upstreams:
            for tool in upstream.tools:
                exposed[upstream.exposed(tool)] = upstream.name
        principals_data = self.section(
            data, "principals", "principals", set(data.get("principals") or ())
        )
        if not principals_data:
            raise self.fail(
                data,
                "principals" if "principals" in data else None,
                "principals",
                "at least one principal is required",
            )
        principals = {name: self.principal(principals_data, name) for name in principals_data}
        serve = self.section(data, "serve", "serve", {"stdio", "http"})
        stdio = self.section(serve, "stdio", "serve.stdio", {"principal"})
        stdio_principal = self.get(stdio, "principal", "serve.stdio.principal", str, None)
        if stdio_principal is not None and stdio_principal not in principals:
            raise self.fail(
                stdio,
                "principal",
                "serve.stdio.principal",
                f"no principal named {stdio_principal!r}",
            )
        http = self.http(serve, principals)
        return GatewayConfig(
            path=None,
            upstreams=upstreams,
            principals=principals,
            stdio_principal=stdio_principal,
            http=http,
            store=store,
            policy=self.policy(data),
            telemetry=self.telemetry(data),
        )

    def upstream(self, parent: _Map, name: str) -> UpstreamConfig:
        path = f"upstreams.{name}"
        data = self.section(
            parent,
            name,
            path,
            {
                "command",
                "env",
                "cwd",
                "url",
                "headers",
                "namespace",
                "timeout",
                "connect_timeout",
                "max_result_bytes",
                "tools",
            },
        )
        command = self.strings(data, "command", f"{path}.command")
        url = self.get(data, "url", f"{path}.url", str, None)
        if (command is None) == (url is None):
            raise self.fail(
                parent, name, path, "needs exactly one of command (stdio) or url (HTTP)"
            )
        if url is not None and not url.startswith(("http://", "https://")):
            raise self.fail(data, "url", f"{path}.url", f"expected an http(s) URL, got {url!r}")
        namespace = self.get(data, "namespace", f"{path}.namespace", str, None)
        tools_data = self.section(data, "tools", f"{path}.tools", set(data.get("tools") or ()))
        cwd = self.get(data, "cwd", f"{path}.cwd", str, None)
        return UpstreamConfig(
            name=name,
            command=command,
            env=self.mapping_of_strings(data, "env", f"{path}.env"),
            cwd=str(self.base / cwd) if cwd is not None else str(self.base),
            url=url,
            headers={
                k: os.path.expandvars(v)
                for k, v in self.mapping_of_strings(data, "headers", f"{path}.headers").items()
            },
            namespace=namespace,
            timeout=float(self.positive(data, "timeout", f"{path}.timeout", 10.0)),
            connect_timeout=float(
                self.positive(data, "connect_timeout", f"{path}.connect_timeout", 15.0)
            ),
            max_result_bytes=int(
                self.positive(data, "max_result_bytes", f"{path}.max_result_bytes", 1_000_000)
            ),
            tools={
                tool: self.tool(tools_data, tool, f"{path}.tools.{tool}") for tool in tools_data
            },
        )

    def tool(self, parent: _Map, name: str, path: str) -> ToolConfig:
        data = self.section(
            parent,
            name,
            path,
            {
                "effect",
                "risk",
                "scope",
                "untrusted_output",
                "result_fields",
                "rate_limit",
                "daily_limit",
                "amount_limit",
                "strict",
                "timeout",
                "idempotent",
                "hidden",
            },
        )
        effect = self.choice(
            data, "effect", f"{path}.effect", {"read": Effect.READ, "write": Effect.WRITE}
        )
        risk = self.choice(data, "risk", f"{path}.risk", _RISKS)
        amount = None
        if "amount_limit" in data:
            limit = self.section(
                data,
                "amount_limit",
                f"{path}.amount_limit",
                {"field", "per_request", "per_day", "group_by"},
            )
            field_name = self.get(limit, "field", f"{path}.amount_limit.field", str, None)
            if field_name is None:
                raise self.fail(data, "amount_limit", f"{path}.amount_limit", "needs a field")
            amount = AmountLimitConfig(
                field=field_name,
                per_request=self.get(
                    limit, "per_request", f"{path}.amount_limit.per_request", int, None
                ),
                per_day=self.get(limit, "per_day", f"{path}.amount_limit.per_day", int, None),
                group_by=self.get(limit, "group_by", f"{path}.amount_limit.group_by", str, None),
            )
        timeout = self.get(data, "timeout", f"{path}.timeout", (int, float), None)
        return ToolConfig(
            effect=effect,
            risk=risk,
            scope=self.get(data, "scope", f"{path}.scope", str, None),
            untrusted_output=self.get(
                data, "untrusted_output", f"{path}.untrusted_output", bool, False
            ),
            result_fields=self.strings(data, "result_fields", f"{path}.result_fields"),
            rate_limit=self.rate(data, "rate_limit", f"{path}.rate_limit"),
            daily_limit=self.get(data, "daily_limit", f"{path}.daily_limit", int, None),
            amount_limit=amount,
            strict=self.get(data, "strict", f"{path}.strict", bool, True),
            timeout=float(timeout) if timeout is not None else None,
            idempotent=self.get(data, "idempotent", f"{path}.idempotent", bool, None),
            hidden=self.get(data, "hidden", f"{path}.hidden", bool, False),
        )

    def principal(self, parent: _Map, name: str) -> PrincipalConfig:
        path = f"principals.{name}"
        data = self.section(parent, name, path, {"tools", "scopes", "role"})
        tools = self.strings(data, "tools", f"{path}.tools")
        if tools is None:
            raise self.fail(parent, name, path, "needs tools: the names it may call, or '*'")
        return PrincipalConfig(
            name=name,
            tools=tools,
            scopes=frozenset(self.strings(data, "scopes", f"{path}.scopes") or ()),
            role=self.get(data, "role", f"{path}.role", str, None),
        )

    def http(self, serve: _Map, principals: Mapping[str, PrincipalConfig]) -> HttpConfig:
        data = self.section(serve, "http", "serve.http", {"host", "port", "path", "tokens"})
        tokens: list[TokenConfig] = []
        raw = data.get("tokens") or []
        if not isinstance(raw, list):
            raise self.fail(data, "tokens", "serve.http.tokens", "expected a list")
        for index, entry in enumerate(raw):
            path = f"serve.http.tokens[{index}]"
            if not isinstance(entry, _Map):
                raise self.fail(
                    data, "tokens", path, "expected a mapping with token_env and principal"
                )
            self.only(entry, path, {"token", "token_env", "principal"})
            principal = self.get(entry, "principal", f"{path}.principal", str, None)
            if principal not in principals:
                raise self.fail(
                    entry, "principal", f"{path}.principal", f"no principal named {principal!r}"
                )
            token = self.get(entry, "token", f"{path}.token", str, None)
            env = self.get(entry, "token_env", f"{path}.token_env", str, None)
            if (token is None) == (env is None):
                raise self.fail(entry, None, path, "needs exactly one of token_env or token")
            if env is not None:
                token = os.environ.get(env)
                if not token:
                    raise self.fail(
                        entry,
                        "token_env",
                        f"{path}.token_env",
                        f"environment variable {env} is not set",
                    )
            assert token is not None
            if len(token) < 16:
                raise self.fail(entry, None, path, "the token must be at least 16 characters")
            tokens.append(TokenConfig(token=token, principal=principal))
        port = self.get(data, "port", "serve.http.port", int, 8765)
        return HttpConfig(
            host=self.get(data, "host", "serve.http.host", str, "127.0.0.1"),
            port=port,
            path=self.get(data, "path", "serve.http.path", str, "/mcp"),
            tokens=tuple(tokens),
        )

    def policy(self, data: _Map) -> PolicyConfig:
        policy = self.section(
            data,
            "policy",
            "policy",
            {
                "max_steps_per_session",
                "rate_limit",
                "max_invalid_in_a_row",
                "max_identical_calls",
                "confirm_at",
                "confirmation_ttl",
                "taint_requires_confirmation",
                "elicitation_timeout",
                "shadow",
            },
        )
        shadow: bool | tuple[str, ...] = False
        if isinstance(policy.get("shadow"), bool):
            shadow = policy["shadow"]
        elif policy.get("shadow") is not None:
            shadow = self.strings(policy, "shadow", "policy.shadow") or ()
        defaults = PolicyConfig()
        return PolicyConfig(
            max_steps_per_session=self.get(
                policy,
                "max_steps_per_session",
                "policy.max_steps_per_session",
                int,
                defaults.max_steps_per_session,
            ),
            rate_limit=self.rate(policy, "rate_limit", "policy.rate_limit"),
            max_invalid_in_a_row=self.get(
                policy,
                "max_invalid_in_a_row",
                "policy.max_invalid_in_a_row",
                int,
                defaults.max_invalid_in_a_row,
            ),
            max_identical_calls=self.get(
                policy,
                "max_identical_calls",
                "policy.max_identical_calls",
                int,
                defaults.max_identical_calls,
            ),
            confirm_at=self.choice(policy, "confirm_at", "policy.confirm_at", _RISKS)
            or defaults.confirm_at,
            confirmation_ttl=float(
                self.positive(
                    policy, "confirmation_ttl", "policy.confirmation_ttl", defaults.confirmation_ttl
                )
            ),
            taint_requires_confirmation=self.get(
                policy,
                "taint_requires_confirmation",
                "policy.taint_requires_confirmation",
                bool,
                True,
            ),
            elicitation_timeout=float(
                self.positive(
                    policy,
                    "elicitation_timeout",
                    "policy.elicitation_timeout",
                    defaults.elicitation_timeout,
                )
            ),
            shadow=shadow,
        )

    def telemetry(self, data: _Map) -> TelemetryConfig:
        section = self.section(
            data,
            "telemetry",
            "telemetry",
            {
                "service_name",
                "trail",
                "trail_dir",
                "otlp_endpoint",
                "otlp_protocol",
            },
        )
        trail_dir = self.get(section, "trail_dir", "telemetry.trail_dir", str, None)
        protocol = self.choice(
            section,
            "otlp_protocol",
            "telemetry.otlp_protocol",
            {"grpc": "grpc", "http/protobuf": "http/protobuf"},
        )
        return TelemetryConfig(
            service_name=self.get(
                section, "service_name", "telemetry.service_name", str, "callgate-gateway"
            ),
            trail=self.get(section, "trail", "telemetry.trail", bool, True),
            trail_dir=str(self.base / trail_dir) if trail_dir else None,
            otlp_endpoint=self.get(section, "otlp_endpoint", "telemetry.otlp_endpoint", str, None),
            otlp_protocol=protocol or "grpc",
        )

    def rate(self, data: _Map, key: str, path: str) -> RateConfig | None:
        if data.get(key) is None:
            return None
        rate = self.section(data, key, path, {"calls", "seconds"})
        calls = self.get(rate, "calls", f"{path}.calls", int, None)
        seconds = self.get(rate, "seconds", f"{path}.seconds", (int, float), None)
        if not calls or not seconds:
            raise self.fail(data, key, path, "needs calls and seconds, both above zero")
        return RateConfig(calls=calls, seconds=float(seconds))

    def choice(self, data: _Map, key: str, path: str, options: Mapping[str, Any]) -> Any:
        value = data.get(key)
        if value is None:
            return None
        if value not in options:
            raise self.fail(data, key, path, f"expected one of {', '.join(options)}, got {value!r}")
        return options[value]

    def positive(self, data: _Map, key: str, path: str, default: float) -> float:
        value = self.get(data, key, path, (int, float), default)
        if value <= 0:
            raise self.fail(data, key, path, f"must be above zero, got {value!r}")
        return float(value)

    def mapping_of_strings(self, data: _Map, key: str, path: str) -> dict[str, str]:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, _Map) or not all(isinstance(v, str) for v in value.values()):
            raise self.fail(data, key, path, "expected a mapping of strings")
        return dict(value)


def _kind(value: Any) -> str:
    words: dict[type, str] = {dict: "a mapping", _Map: "a mapping", list: "a list", str: "a string"}
    return words.get(type(value), type(value).__name__)


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    words = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
    return " or ".join(words.get(k, k.__name__) for k in kinds)
