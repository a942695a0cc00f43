"""The gateway's YAML config as pydantic models; a malformed file is refused with its line and key.

Every model forbids unknown keys (a misspelt ``confrim_at`` would otherwise be a rule nobody
enforces), takes values as written (no ``"5"`` for 5, no ``yes`` for true), and refuses NaN and
infinity: ``confirmation_ttl: .nan`` would make every pending action "expire" at once. A refusal
reads ``gateway.yaml:14: upstreams.shop.tools.refund.risk: expected one of low, medium, high, got
'huge'``; ``docs/gateway.md`` documents every key (a test checks the two agree).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from callgate.gateway._yaml import LineMap, line_of, load
from guard import Effect, Risk

__all__ = [
    "AmountLimitConfig",
    "ConfigError",
    "GatewayConfig",
    "HttpConfig",
    "PolicyConfig",
    "PrincipalConfig",
    "RateConfig",
    "ServeConfig",
    "StdioConfig",
    "TelemetryConfig",
    "TokenConfig",
    "ToolConfig",
    "UpstreamConfig",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """The config cannot work; the message names the file, the line, the key and the reason."""


def _choice(enum: type[Risk] | type[Effect]) -> BeforeValidator:
    names = {str(member): member for member in enum}

    def pick(value: Any) -> Any:
        if value in names:
            return names[value]
        raise ValueError(f"expected one of {', '.join(names)}, got {value!r}")

    return BeforeValidator(pick)


RiskName = Annotated[Risk, _choice(Risk)]
EffectName = Annotated[Effect, _choice(Effect)]
Seconds = Annotated[float, Field(gt=0)]
Count = Annotated[int, Field(ge=0)]


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


Names = Annotated[
    tuple[str, ...], BeforeValidator(lambda v: (v,) if isinstance(v, str) else _tuple(v))
]

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(value: str) -> str:
    """``${VAR}`` from the environment; an unset one is refused rather than sent as nothing."""

    def variable(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is None:
            raise ValueError(f"environment variable {match.group(1)} is not set")
        return found

    return _VARIABLE.sub(variable, value)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class RateConfig(_Model):
    """At most ``calls`` per ``seconds`` (fixed window)."""

    calls: Annotated[int, Field(gt=0)]
    seconds: Seconds


class AmountLimitConfig(_Model):
    """Caps an integer argument per request and per principal per UTC day (``guard.AmountLimit``)."""

    field: str
    per_request: Count | None = None
    per_day: Count | None = None
    group_by: str | None = None


class ToolConfig(_Model):
    """The policy of one upstream tool. Unset fields come from the tool's MCP annotations."""

    effect: EffectName | None = None
    """read or write; default: read when ``readOnlyHint`` is true, else write."""
    risk: RiskName | None = None
    """low, medium or high; default: high for a ``destructiveHint`` write, medium for other writes."""
    scope: str | None = None
    """The scope a principal needs to call it."""
    untrusted_output: bool = False
    """Its results carry outside text: the session is tainted after it runs."""
    result_fields: Names | None = None
    """The only fields of its structured result passed back; None passes the whole result."""
    rate_limit: RateConfig | None = None
    """Calls per window, per principal."""
    daily_limit: Count | None = None
    """Calls per principal per UTC day that reach the upstream."""
    amount_limit: AmountLimitConfig | None = None
    """Caps one integer argument."""
    strict: bool = True
    """False relaxes validation: unknown fields dropped and values coerced."""
    timeout: Seconds | None = None
    """Seconds per attempt; default: the upstream's."""
    idempotent: bool | None = None
    """The upstream deduplicates repeated writes; default: ``idempotentHint``."""
    hidden: bool = False
    """Never listed nor callable, whoever asks."""


class UpstreamConfig(_Model):
    """One upstream MCP server, reached over stdio (``command``) or streamable HTTP (``url``)."""

    name: str
    command: Names | None = None
    env: dict[str, str] = {}
    cwd: str | None = None
    url: Annotated[str, Field(pattern=r"^https?://")] | None = None
    headers: dict[str, Annotated[str, AfterValidator(_expand)]] = {}
    """HTTP headers; ``${VAR}`` is read from the environment (unset: refused)."""
    namespace: str | None = None
    """Prefix for its tool names downstream (``shop`` gives ``shop_get_order``)."""
    timeout: Seconds = 10.0
    """Seconds per tool call attempt."""
    connect_timeout: Seconds = 15.0
    """Seconds to connect and list tools."""
    max_result_bytes: Annotated[int, Field(gt=0)] = 1_000_000
    """Larger results are refused as they arrive (a typed error), never parsed nor passed on."""
    protocol: Literal["auto", "legacy"] = "auto"
    """``auto`` speaks 2026-07-28 to an upstream that offers it, else the initialize handshake;
    ``legacy`` always the handshake, so fields 2026-07-28 removed (a tool's ``execution``) still
    reach handshake-era clients."""
    tools: dict[str, ToolConfig] = {}

    @field_validator("cwd")
    @classmethod
    def _relative(cls, cwd: str | None, info: ValidationInfo) -> str:
        return str(_base(info) / cwd) if cwd is not None else str(_base(info))

    @model_validator(mode="after")
    def _one_transport(self) -> UpstreamConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command (stdio) or url (HTTP)")
        return self

    def exposed(self, tool: str) -> str:
        """The downstream name of upstream tool ``tool``."""
        return f"{self.namespace}_{tool}" if self.namespace else tool


class PrincipalConfig(_Model):
    """Who a downstream connection acts for, and what it may call."""

    name: str
    tools: Names
    """Downstream tool names it may call, or ``*`` for all. Enforced per principal."""
    scopes: Annotated[frozenset[str], BeforeValidator(lambda v: frozenset(v))] = frozenset()
    role: str | None = None
    """The policy role shown on spans; default: the principal's name."""
    resources: Names = ()
    """URI patterns (fnmatch: ``docs://*``, ``*``) of upstream resources it may list and read."""
    prompts: Names = ()
    """Downstream prompt names (fnmatch, ``*`` for all) it may list and get."""


class TokenConfig(_Model):
    """A bearer token for the HTTP transport and the principal it stands for."""

    token_value: Annotated[str, Field(min_length=16)] | None = Field(default=None, alias="token")
    token_env: str | None = None
    principal: str

    @model_validator(mode="after")
    def _one_source(self) -> TokenConfig:
        if (self.token_value is None) == (self.token_env is None):
            raise ValueError("needs exactly one of token_env or token")
        return self

    @property
    def token(self) -> str:
        """The token; read from ``token_env`` when HTTP serves, so stdio starts without it."""
        if self.token_value is not None:
            return self.token_value
        assert self.token_env is not None
        value = os.environ.get(self.token_env)
        if not value:
            raise ConfigError(f"token_env: environment variable {self.token_env} is not set")
        if len(value) < 16:
            raise ConfigError(f"token_env: {self.token_env} must be at least 16 characters")
        return value


class HttpConfig(_Model):
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8765
    path: str = "/mcp"
    tokens: Annotated[tuple[TokenConfig, ...], BeforeValidator(_tuple)] = ()

    def bearer_tokens(self) -> dict[str, str]:
        """Token -> principal, read now; ``ConfigError`` naming the entry if one is unset or shared."""
        tokens: dict[str, str] = {}
        for index, entry in enumerate(self.tokens):
            where = f"serve.http.tokens[{index}]"
            try:
                token = entry.token
            except ConfigError as err:
                raise ConfigError(f"{where}.{err}") from err
            if token in tokens:
                raise ConfigError(f"{where}: the same token as an earlier entry")
            tokens[token] = entry.principal
        return tokens


class StdioConfig(_Model):
    principal: str | None = None
    lean: bool = True
    """Plain ``tools/call`` requests take the lean path (``_fastcall``); false: all via the SDK."""


class ServeConfig(_Model):
    stdio: StdioConfig = StdioConfig()
    http: HttpConfig = HttpConfig()


class PolicyConfig(_Model):
    """Deployment-wide limits (``guard.Policy``); MCP has no turns, so one turn is the session."""

    max_steps_per_session: Count = 1000
    rate_limit: RateConfig | None = None
    max_invalid_in_a_row: Annotated[int, Field(gt=0)] = 3
    validation_cooldown: Seconds = 60.0
    """Seconds after the last invalid call that an exhausted validation budget is forgiven."""
    max_identical_calls: Annotated[int, Field(gt=0)] = 3
    max_argument_bytes: Annotated[int, Field(gt=0)] = 1_048_576
    """Larger argument texts are refused unparsed (INVALID_JSON, saying the limit)."""
    confirm_at: RiskName = Risk.HIGH
    confirmation_ttl: Seconds = 900.0
    taint_requires_confirmation: bool = True
    in_band_approval: bool = True
    """False: never ask through the client (elicitation); only ``callgate approvals`` decides."""
    elicitation_timeout: Seconds = 300.0
    """Seconds a human has to answer an elicitation before the call returns the pending result."""
    shadow: bool | Names = False
    """Shadow mode (``guard.Guard(shadow=...)``): true, or downstream tool names."""


class TelemetryConfig(_Model):
    service_name: str = "callgate-gateway"
    trail: bool = True
    trail_dir: str | None = None
    otlp_endpoint: str | None = None
    otlp_protocol: Annotated[str, Field(pattern=r"^(grpc|http/protobuf)$")] = "grpc"

    @field_validator("trail_dir")
    @classmethod
    def _relative(cls, trail_dir: str | None, info: ValidationInfo) -> str | None:
        return str(_base(info) / trail_dir) if trail_dir else None


class GatewayConfig(_Model):
    """The whole file."""

    store: str | None = None
    """A SQLite path or a ``redis://`` URL; None keeps everything in memory."""
    telemetry: TelemetryConfig = TelemetryConfig()
    policy: PolicyConfig = PolicyConfig()
    upstreams: Annotated[tuple[UpstreamConfig, ...], Field(min_length=1)]
    principals: Annotated[dict[str, PrincipalConfig], Field(min_length=1)]
    serve: ServeConfig = ServeConfig()

    @model_validator(mode="before")
    @classmethod
    def _named(cls, data: Any) -> Any:
        """``upstreams`` and ``principals`` are mappings by name in the file; each child gets it."""
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for section in ("upstreams", "principals"):
            if isinstance(named := data.get(section), Mapping):
                children = {
                    key: {**value, "name": key} if isinstance(value, Mapping) else value
                    for key, value in named.items()
                }
                data[section] = tuple(children.values()) if section == "upstreams" else children
        return data

    @field_validator("store")
    @classmethod
    def _store(cls, store: str | None, info: ValidationInfo) -> str | None:
        if store is None or store.startswith(("redis://", "rediss://", "unix://")):
            return store
        return store if os.path.isabs(store) else str((_base(info) / store).resolve())

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        names = set(self.principals)
        for principal in self.principals.values():
            role = principal.role
            if role is not None and role != principal.name and role in names:
                # Its spans and limits would read as the other principal's.
                raise ValueError(
                    f"principals.{principal.name}.role: {role!r} is the name of another "
                    "principal; give the role a name of its own"
                )
        if (stdio := self.serve.stdio.principal) is not None and stdio not in names:
            raise ValueError(f"serve.stdio.principal: no principal named {stdio!r}")
        for index, token in enumerate(self.serve.http.tokens):
            if token.principal not in names:
                raise ValueError(
                    f"serve.http.tokens[{index}].principal: no principal named {token.principal!r}"
                )
        literal = [t.token_value for t in self.serve.http.tokens if t.token_value is not None]
        if len(set(literal)) != len(literal):
            raise ValueError("serve.http.tokens: two entries carry the same token")
        return self

    @property
    def stdio_principal(self) -> str | None:
        """The principal served over stdio (``serve.stdio.principal``)."""
        return self.serve.stdio.principal

    @property
    def http(self) -> HttpConfig:
        return self.serve.http


def _base(info: ValidationInfo) -> Path:
    context = info.context if isinstance(info.context, Mapping) else {}
    base = context.get("base")
    return base if isinstance(base, Path) else Path.cwd()


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
    label = str(source) if source else "<config>"
    try:
        data = load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{label}{line}: not valid YAML: {problem}") from err
    if not isinstance(data, LineMap):
        raise ConfigError(f"{label}:1: the config must be a mapping")
    base = source.parent if source else Path.cwd()
    try:
        return GatewayConfig.model_validate(data, context={"base": base})
    except ValidationError as err:
        raise ConfigError(_explain(label, data, err)) from None


def _explain(label: str, data: LineMap, error: ValidationError) -> str:
    """The first problem as ``file:line: key.path: reason``."""
    first = error.errors(include_url=False)[0]
    location = [step for step in first["loc"] if not _is_union_branch(step)]
    line, path = line_of(data, location)
    reason = _reason(first)
    if first["type"] == "extra_forbidden" and (model := _model_at(location[:-1])) is not None:
        keys = sorted(f.alias or name for name, f in model.model_fields.items() if name != "name")
        reason += f" (expected one of {', '.join(keys)})"
    if path.endswith(".name") or not path:  # a model-wide check names its own key
        match = re.match(r"([\w.\[\]]+): (.*)", reason)
        if match:
            path, reason = match.group(1), match.group(2)
            line = line_of(data, _steps(path))[0]
    return f"{label}:{line}: {path or '(top level)'}: {reason}"


def _reason(problem: Any) -> str:
    kind, value, message = problem["type"], problem.get("input"), str(problem["msg"])
    if kind == "extra_forbidden":
        return "unknown key"  # _explain adds the keys the section has
    if kind == "missing" or (kind == "too_short" and not value):
        where = problem["loc"][-1] if problem["loc"] else ""
        return {"upstreams": "at least one upstream is required"}.get(
            str(where),
            {"principals": "at least one principal is required"}.get(str(where), "required"),
        )
    if kind == "finite_number":
        return f"must be a finite number, got {value!r}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"expected {message.removeprefix('Input should be ')}, got {type(value).__name__} {value!r}"
    if kind in ("value_error", "assertion_error"):
        return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind == "string_too_short":  # never echo the value: it may be a token
        return message.replace("String should have", "must have")
    return f"{message.removeprefix('Input should be ')} (got {value!r})"


def _model_at(location: list[str | int]) -> type[BaseModel] | None:
    """The model that reads the mapping at ``location`` (to list the keys it knows)."""
    model: type[BaseModel] = GatewayConfig
    pending: list[Any] = []
    for step in location:
        if pending:  # inside a dict or tuple field: this step is the key or index
            kinds, pending = pending, []
        elif isinstance(step, str) and step in model.model_fields:
            kinds = [model.model_fields[step].annotation]
        else:
            return None
        found = _first_model(kinds)
        if found is None:
            return None
        model, container = found
        if container:
            pending = [model]
    return None if pending else model


def _first_model(kinds: list[Any]) -> tuple[type[BaseModel], bool] | None:
    """The first model in ``kinds`` (unwrapping Optional/Annotated) and whether it sits in a
    container (a dict's values, a tuple's items)."""
    for kind in kinds:
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind, False
        args = [a for a in getattr(kind, "__args__", ()) if a is not type(None)]
        origin = getattr(kind, "__origin__", None)
        inner = _first_model(args)
        if inner is not None:
            return inner[0], inner[1] or origin in (dict, tuple)
    return None


def _is_union_branch(step: str | int) -> bool:
    # pydantic names the branch of an optional or union field in the location: not a key.
    return isinstance(step, str) and (
        step.startswith(("function-", "tuple[", "frozenset[", "dict[", "json-or-python"))
        or step in ("str", "int", "float", "bool", "none")
        or step.endswith("]")
    )


def _steps(path: str) -> list[str | int]:
    steps: list[str | int] = []
    for part in path.split("."):
        name, *indexes = part.split("[")
        steps.append(name)
        steps.extend(int(index.rstrip("]")) for index in indexes)
    return steps
