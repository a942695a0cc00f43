"""An upstream MCP tool as a guard ``ToolSpec``: schema, policy, and a handler that calls the upstream.

Defaults come from the tool's MCP annotations, read as the spec defines them: a tool is a write
unless ``readOnlyHint`` is true; a write is destructive unless ``destructiveHint`` is false; a write
is idempotent only if ``idempotentHint`` is true. So an unannotated tool is a destructive,
non-idempotent write: high risk (a human confirms it at the default ``confirm_at``) and never
retried after a timeout. The config overrides any of it per tool.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
from pydantic import BaseModel, ConfigDict, ValidationError, create_model, model_validator

from callgate.gateway.config import ToolConfig, UpstreamConfig
from callgate.gateway.schema import model_from_schema
from callgate.gateway.upstream import TooLarge, Upstream, UpstreamRefused
from guard import (
    AmountLimit,
    CheckContext,
    Code,
    Effect,
    Risk,
    RuleViolation,
    ToolContext,
    ToolSpec,
)
from guard.stores import CounterStore

__all__ = ["GatewayTool", "ToolBuild", "build_tool", "filtered", "passed_result"]

DAY = 86_400.0
_PROTOCOL_META = "io.modelcontextprotocol/"


@dataclass(kw_only=True)
class GatewayTool:
    """What the gateway tracks about one exposed tool besides its spec."""

    exposed: str
    """The name downstream (namespaced)."""
    upstream: Upstream
    upstream_name: str
    """The name at the upstream."""
    definition: dict[str, Any]
    """The upstream's definition as listed (wire JSON)."""
    pin_key: str
    """``upstream/tool``, the key of its pin."""
    current_hash: str
    """The hash of the definition listed now."""
    blocked: bool = False
    """The definition no longer matches its pins (see ``pins.review``)."""
    pins_seen: tuple[str | None, str | None] = (None, None)
    """The pins as found when it was indexed: when they change, an operator re-pinned."""
    spec: ToolSpec | None = None
    limit: AmountLimit | None = None
    """Its amount limit, for the policy."""
    listed: types.Tool | None = None
    """Its ``tools/list`` entry: the upstream's definition under the exposed name."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolBuild:
    """What building a spec needs beyond the tool itself."""

    counters: CounterStore
    current: Callable[[str], GatewayTool | None]
    """The gateway's entry for a downstream name now (a reconnect may have replaced it)."""


def effect_of(tool: types.Tool, config: ToolConfig) -> Effect:
    if config.effect is not None:
        return config.effect
    hints = tool.annotations
    return Effect.READ if hints is not None and hints.read_only_hint is True else Effect.WRITE


def risk_of(tool: types.Tool, config: ToolConfig, effect: Effect) -> Risk:
    if config.risk is not None:
        return config.risk
    if effect is Effect.READ:
        return Risk.LOW
    hints = tool.annotations
    destructive = hints is None or hints.destructive_hint is not False
    return Risk.HIGH if destructive else Risk.MEDIUM


def build_tool(
    entry: GatewayTool, tool: types.Tool, upstream: UpstreamConfig, build: ToolBuild
) -> tuple[ToolSpec, AmountLimit | None]:
    """The spec for ``entry``, and its amount limit for the policy; ``UnsupportedSchema`` if refused."""
    config = upstream.tools.get(tool.name, ToolConfig())
    effect = effect_of(tool, config)
    if entry.blocked:
        arguments = _blocked_model(entry.exposed)
    else:
        arguments = model_from_schema(entry.exposed, tool.input_schema, strict=config.strict)
    hints = tool.annotations
    idempotent = (
        config.idempotent
        if config.idempotent is not None
        else bool(hints is not None and hints.idempotent_hint is True)
    )
    spec = ToolSpec(
        name=entry.exposed,
        description=tool.description or tool.title or entry.exposed,
        arguments=arguments,
        handler=_handler(entry, config, upstream, effect, build),
        effect=effect,
        risk=risk_of(tool, config, effect),
        scope=config.scope,
        check=_check(entry, config, build),
        untrusted_output=config.untrusted_output,
        timeout=config.timeout if config.timeout is not None else upstream.timeout,
        idempotent_backend=idempotent,
    )
    limit = None
    if config.amount_limit is not None:
        amount = config.amount_limit
        if amount.field not in arguments.model_fields and not entry.blocked:
            raise ValueError(
                f"tool {entry.exposed!r}: amount_limit.field {amount.field!r} is not an argument"
            )
        limit = AmountLimit(
            tool=entry.exposed,
            field=amount.field,
            per_request=amount.per_request,
            per_day=amount.per_day,
            group_by=amount.group_by,
        )
    return spec, limit


def _check(
    entry: GatewayTool, config: ToolConfig, build: ToolBuild
) -> Callable[[Any, CheckContext], None]:
    counters, rate, daily = build.counters, config.rate_limit, config.daily_limit

    def check(arguments: Any, context: CheckContext) -> None:
        if entry.blocked:
            raise _changed(entry.exposed)
        now = time.time()
        who = context.principal.id
        # An approved call's re-check: its proposal already counted in the window it was made.
        if rate is not None and context.approval_id is None:
            window = int(now // rate.seconds)
            key = f"gw:rate:{who}:{entry.exposed}:{window}"
            if counters.incr(key, now=now, ttl=rate.seconds * 2) > rate.calls:
                raise RuleViolation(
                    Code.RATE_LIMITED,
                    f"{entry.exposed} may be called {rate.calls} times per {rate.seconds:g} s; "
                    "wait, then retry once.",
                )
        if daily is not None and counters.get(_day_key(who, entry.exposed, now), now=now) >= daily:
            raise RuleViolation(Code.POLICY_LIMIT, _DAILY.format(tool=entry.exposed))

    return check


def _handler(
    entry: GatewayTool,
    config: ToolConfig,
    upstream: UpstreamConfig,
    effect: Effect,
    build: ToolBuild,
) -> Callable[[BaseModel, ToolContext], Any]:
    daily, fields, counters = config.daily_limit, config.result_fields, build.counters
    limit_bytes, is_write = upstream.max_result_bytes, effect is Effect.WRITE

    def still_pinned() -> None:
        now = build.current(entry.exposed)
        if now is None or now.blocked or now.current_hash != entry.current_hash:
            raise _changed(entry.exposed)

    async def call_upstream(arguments: BaseModel, context: ToolContext) -> Any:
        if daily is not None and context.attempt == 1:
            now = time.time()
            key = _day_key(context.principal.id, entry.exposed, now)
            if not counters.add_within(key, 1, daily, now=now, ttl=2 * DAY):
                raise RuleViolation(Code.POLICY_LIMIT, _DAILY.format(tool=entry.exposed))
        sent = arguments.model_dump(mode="json")
        try:
            result = await entry.upstream.call(
                entry.upstream_name, sent, context.timeout, connected=still_pinned
            )
        except UpstreamRefused as refused:
            raise RuleViolation(
                Code.UPSTREAM_REJECTED,
                f"The service refused the call ({refused.code}): {_clip(refused.message)}. "
                "Nothing was done.",
            ) from refused
        except TooLarge as big:  # dropped as it arrived, never parsed
            raise _unreadable(
                entry.exposed, is_write, f"a result over {limit_bytes} bytes"
            ) from big
        except ValidationError as malformed:  # the SDK could not read the upstream's answer
            raise _unreadable(entry.exposed, is_write, "a malformed result") from malformed
        return passed_result(
            result, fields=fields, limit_bytes=limit_bytes, tool=entry.exposed, is_write=is_write
        )

    return call_upstream


def passed_result(
    result: dict[str, Any],
    *,
    fields: tuple[str, ...] | None,
    limit_bytes: int,
    tool: str,
    is_write: bool,
) -> dict[str, Any]:
    """The upstream's result as wire JSON, the data the guard passes on: bounded, otherwise unchanged.

    Only what the upstream set is kept (``exclude_unset``): its content blocks with their
    annotations, its ``structuredContent`` as parsed (integers stay integers), its ``isError`` and
    ``_meta``. ``server.render`` hands it to the client as it is, the verdict beside it in
    ``_meta``. An error result raises ``UPSTREAM_REJECTED`` carrying it, so the client sees the
    upstream's own error content and the guard records a refusal (nothing was done).
    ``fields`` (``result_fields``) is the one exception: see ``filtered``."""
    wire = dict(result)  # wire JSON as the upstream set it (``Upstream.call``)
    wire.pop("resultType", None)  # the SDK's own field: the downstream server sets its own
    if isinstance(meta := wire.get("_meta"), dict):
        # Protocol keys (the upstream's serverInfo stamp) describe that connection, not the result.
        kept = {k: v for k, v in meta.items() if not k.startswith(_PROTOCOL_META)}
        if kept:
            wire["_meta"] = kept
        else:
            del wire["_meta"]
    size = _size(wire)
    if size > limit_bytes:
        raise _unreadable(tool, is_write, f"a result of {size} bytes (the limit is {limit_bytes})")
    if wire.get("isError") is True:
        texts = [
            block["text"]
            for block in wire.get("content") or ()
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        raise RuleViolation(
            Code.UPSTREAM_REJECTED,
            f"The tool reported an error: {_clip(' '.join(texts)) or 'no detail'}.",
            data=wire,
        )
    return wire if fields is None else filtered(types.CallToolResult.model_validate(wire), fields)


def filtered(result: types.CallToolResult, fields: tuple[str, ...]) -> dict[str, Any]:
    """A result cut to ``fields``: the structured result (or the one JSON text block) keeps only
    those keys and the content becomes its JSON text, so nothing else reaches the model. The tool
    is listed without its ``outputSchema``, which the cut result need not match."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    data: Any = result.structured_content
    if not isinstance(data, dict):
        data = _json_object(texts[0]) if len(texts) == 1 else None
    kept = {key: data[key] for key in fields if key in data} if isinstance(data, dict) else {}
    text = json.dumps(kept, ensure_ascii=False)
    return {"content": [{"type": "text", "text": text}], "structuredContent": kept}


def _size(wire: dict[str, Any]) -> int:
    """Bytes of ``wire`` as compact UTF-8 JSON (orjson; the standard writer for integers past
    64 bits, which orjson does not write)."""
    try:
        return len(orjson.dumps(wire))
    except TypeError:
        return len(json.dumps(wire, ensure_ascii=False, separators=(",", ":")).encode())


class _Unreadable(Exception):
    """A write's answer the gateway cannot pass on: the write may have happened (INTERNAL_ERROR)."""


def _unreadable(tool: str, is_write: bool, what: str) -> Exception:
    if is_write:
        return _Unreadable(f"{tool} answered with {what}")
    return RuleViolation(
        Code.UPSTREAM_REJECTED,
        f"The service answered with {what}, which was not passed on. Do not retry; tell the user.",
    )


def _changed(tool: str) -> RuleViolation:
    return RuleViolation(
        Code.TOOL_DEFINITION_CHANGED,
        f"The tool {tool!r} changed upstream since it was reviewed and is blocked until an "
        "operator re-pins it. Do not retry; tell the user it is unavailable.",
    )


def _json_object(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _day_key(principal: str, tool: str, now: float) -> str:
    return f"gw:day:{principal}:{tool}:{math.floor(now / DAY)}"


_DAILY = "The daily limit for {tool} is reached. Do not retry today; offer the user a human agent."


def _blocked_model(name: str) -> type[BaseModel]:
    """Arguments of a blocked tool: anything is accepted, so every call reaches the pin check."""

    def discard(cls: type[BaseModel], data: Any) -> Any:
        return {}

    validators: dict[str, Any] = {"discard": model_validator(mode="before")(discard)}
    model: type[BaseModel] = create_model(
        name.replace(".", "_") + "Blocked",
        __config__=ConfigDict(extra="forbid"),
        __validators__=validators,
    )
    return model
