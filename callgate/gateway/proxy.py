"""Everything MCP carries besides tools, between the client and the upstreams: relayed or refused.

Relayed, upstream to client:

- **progress** (``notifications/progress``) of a tool call, against the client's own progress token,
  while the call runs (``Relay``, set around the call by the server);
- **log messages** (``notifications/message``) an upstream sends while a call of this client is in
  flight on it, on that call's stream; messages between calls are logged here, not sent to anyone,
  because nothing says whose they are.

Proxied, client to upstream, read-only and under each principal's allowlist (``resources`` and
``prompts`` in its config, nothing by default):

- ``resources/list``, ``resources/templates/list`` and ``resources/read``: a read goes to the
  upstream that listed the URI, returned it as a resource link, or declares a template it matches;
  a span per read (``gateway.resource.read``: principal, session and URI masked with the guard's
  masker, the upstream, ``guard.outcome`` ok or refused);
- ``prompts/list`` and ``prompts/get``, with the upstream's namespace on the name as for tools;
- ``completion/complete`` for a prompt or a resource template the principal may use;
- ``resources/subscribe`` and ``resources/unsubscribe`` (handshake era), and ``subscriptions/listen``
  (2026-07-28, ``callgate.gateway.listen``), for a URI the principal may read, when an upstream
  offers subscriptions: updates go only to the session or stream that subscribed
  (``callgate.gateway.subscriptions``); a span per request (``gateway.resource.subscribe``,
  ``gateway.resource.unsubscribe``, masked as reads are).

A resource read or a prompt is text an upstream wrote, which the model then reads: it taints the
guard session, as a tool with ``untrusted_output`` does, so a write that follows is gated.

Refused by choice: an upstream's **sampling** (it would have the client's model write text for a
party the guard does not trust, outside any tool call), **elicitation** (it would put questions to
the human that the gateway did not ask, the channel approvals rely on) and **roots** (the client's
file system layout is not the upstream's business). The gateway's upstream client does not declare
these capabilities, so a conforming upstream never asks, and one that asks anyway gets the SDK's
method-not-found error; the client never sees the request.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import warnings
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from opentelemetry import trace

from callgate.gateway.listen import Listen
from callgate.gateway.subscriptions import Subscriber, Subscribers, ends_with, live
from guard.stages.policy import taint_key
from telemetry import attributes as attr
from telemetry.observer import TracerSink

if TYPE_CHECKING:
    from mcp import Client
    from mcp.server.connection import Connection

    from callgate.gateway.gateway import Gateway
    from callgate.gateway.server import Identity
    from callgate.gateway.upstream import Upstream

__all__ = [
    "Relay",
    "RelayTarget",
    "Relays",
    "handlers",
    "logging_declared",
    "relaying",
    "relaying_to",
]

log = logging.getLogger("callgate.gateway")

RESOURCE_NOT_FOUND = -32002
"""The MCP error code for a resource that is not there (or, here, not readable by this principal)."""

_LINKS_KEPT = 10_000
"""Resource-link URIs remembered per upstream (the oldest are forgotten first)."""

_T = TypeVar("_T")


class RelayTarget(Protocol):
    """Where a tool call's progress and log messages go (``Relay``, or the stdio lean path's)."""

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def log(self, params: types.LoggingMessageNotificationParams) -> None: ...


_CURRENT: ContextVar[RelayTarget | None] = ContextVar("callgate_gateway_relay", default=None)


@dataclass(eq=False, kw_only=True)
class Relay:
    """The client request a tool call is made for: where its progress and log messages go."""

    ctx: ServerRequestContext[Any, Any]

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        """Report progress against the client's own token (a no-op if it asked for none)."""
        try:
            await self.ctx.session.report_progress(progress, total, message)
        except Exception:  # a client that went away must not fail the upstream's call
            log.debug("progress not relayed", exc_info=True)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        """Send an upstream's log message on this request's stream (if the client opted in)."""
        try:
            with logging_declared():
                await self.ctx.session.send_log_message(
                    params.level, params.data, params.logger, related_request_id=self.ctx.request_id
                )
        except Exception:
            log.debug("log message not relayed", exc_info=True)


@contextmanager
def relaying(ctx: ServerRequestContext[Any, Any]) -> Iterator[None]:
    """Within: upstream calls made for this request relay their progress and logs to it."""
    with relaying_to(Relay(ctx=ctx)):
        yield


@contextmanager
def relaying_to(target: RelayTarget) -> Iterator[None]:
    """Within: upstream calls relay their progress and logs to ``target``."""
    token = _CURRENT.set(target)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@dataclass(eq=False)
class Relays:
    """One upstream's side: the client requests with a call in flight on it, and its links."""

    name: str
    in_flight: list[RelayTarget] = field(default_factory=list)
    links: dict[str, None] = field(default_factory=dict)
    """Resource-link URIs the upstream returned from tool calls: readable through it."""
    subscriptions: Subscribers = field(init=False)
    """The client connections subscribed to its resources (``callgate.gateway.subscriptions``)."""

    def __post_init__(self) -> None:
        self.subscriptions = Subscribers(self.name)

    @contextmanager
    def during(self) -> Iterator[Any]:
        """Around one upstream call: yields its progress callback (None if no client request)."""
        relay = _CURRENT.get()
        if relay is None:
            yield None
            return
        self.in_flight.append(relay)
        try:
            yield relay.progress
        finally:
            self.in_flight.remove(relay)

    def returned(self, result: types.CallToolResult) -> None:
        """Remember the resource links in a tool result, so the client can read them."""
        for block in result.content:
            if isinstance(block, types.ResourceLink):
                self.links.pop(str(block.uri), None)
                self.links[str(block.uri)] = None
        while len(self.links) > _LINKS_KEPT:
            self.links.pop(next(iter(self.links)))

    async def logged(self, params: types.LoggingMessageNotificationParams) -> None:
        """An upstream log message: to the requests in flight on it, else only to our own log."""
        if not self.in_flight:
            log.info("upstream %s logged (%s): %s", self.name, params.level, params.data)
        for relay in list(self.in_flight):
            await relay.log(params)


@contextmanager
def logging_declared() -> Iterator[None]:
    """Within: the SDK's deprecation warning for the logging capability is not raised.

    Logging is deprecated from 2026-07-28 but still what handshake-era clients use, and the
    gateway relays what its upstreams log: it declares the capability on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
        yield


def handlers(gateway: Gateway, identity: Identity) -> dict[str, Any]:
    """The low-level server's handlers for resources, prompts, completions and logging level."""
    proxy = _Proxy(gateway, identity)
    found: dict[str, Any] = {
        "on_list_resources": proxy.list_resources,
        "on_list_resource_templates": proxy.list_templates,
        "on_read_resource": proxy.read_resource,
        "on_list_prompts": proxy.list_prompts,
        "on_get_prompt": proxy.get_prompt,
        "on_completion": proxy.complete,
        "on_set_logging_level": proxy.set_level,
    }
    # The SDK declares ``resources.subscribe`` when these are registered (``subscriptions/listen``
    # on 2026-07-28): only if an upstream offers subscriptions (as connected at startup).
    if any(upstream.relays.subscriptions.offered for upstream in gateway.upstreams):
        found["on_subscribe_resource"] = proxy.subscribe
        found["on_unsubscribe_resource"] = proxy.unsubscribe
        found["on_subscriptions_listen"] = Listen(gateway, proxy.subscribed)
    return found


class _Proxy:
    def __init__(self, gateway: Gateway, identity: Identity) -> None:
        self.gateway = gateway
        self.identity = identity
        # The read spans go where the guard's call spans go, masked with the same key.
        sink = _tracing(gateway.observer)
        self.tracer = sink.tracer if sink is not None else trace.get_tracer("callgate.gateway")
        self.masker = sink.masker if sink is not None else None

    # -- resources --------------------------------------------------------------------------------

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        patterns = self._patterns(ctx, "resources")
        found: list[types.Resource] = []
        for _, client in await self._serving("resources"):
            for resource in await _all(client, "list_resources", "resources"):
                if _matches(str(resource.uri), patterns):
                    found.append(resource)
        return types.ListResourcesResult(resources=found)

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        patterns = self._patterns(ctx, "resources")
        found: list[types.ResourceTemplate] = []
        for _, client in await self._serving("resources"):
            for template in await _all(client, "list_resource_templates", "resource_templates"):
                if _matches(template.uri_template, patterns):
                    found.append(template)
        return types.ListResourceTemplatesResult(resource_templates=found)

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        principal, session_id = self.identity(ctx)
        with self._span("gateway.resource.read", ctx, uri) as span:
            if not _matches(uri, self._patterns(ctx, "resources")):
                span.set_attribute(attr.OUTCOME, "refused")
                raise _not_found(uri)
            owner = await self._owner(uri)
            if owner is None:
                span.set_attribute(attr.OUTCOME, "refused")
                raise _not_found(uri)
            upstream, client = owner
            span.set_attribute("gateway.upstream", upstream.name)
            result = await _relayed(upstream, client.read_resource(uri))
            self._seen_untrusted(principal, session_id)
            span.set_attribute(attr.OUTCOME, "ok")
            return result

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """Updates of a resource the principal may read to this client connection (handshake era)."""
        connection = _connection(ctx)
        if not await self.subscribed(ctx, str(params.uri), connection):
            raise _not_found(str(params.uri))
        ends_with(connection, self.gateway.upstreams)
        return types.EmptyResult()

    async def subscribed(
        self, ctx: ServerRequestContext[Any, Any], uri: str, subscriber: Subscriber
    ) -> bool:
        """Subscribe ``subscriber`` to ``uri`` at the upstream that owns it (one that offers
        subscriptions; a URI no upstream lists yet goes to the one upstream offering them); False
        when the principal may not read it or no one upstream takes it. A span either way."""
        with self._span("gateway.resource.subscribe", ctx, uri) as span:
            span.set_attribute(attr.OUTCOME, "refused")
            if not _matches(uri, self._patterns(ctx, "resources")):
                return False
            claimants = await self._claimants(uri)
            if not claimants:
                claimants = [
                    (upstream, client)
                    for upstream, client in await self._serving("resources")
                    if upstream.relays.subscriptions.offered
                ]
            if len(claimants) != 1 or not claimants[0][0].relays.subscriptions.offered:
                return False
            [(upstream, client)] = claimants
            span.set_attribute("gateway.upstream", upstream.name)
            await _relayed(
                upstream, upstream.relays.subscriptions.subscribe(uri, subscriber, client)
            )
            span.set_attribute(attr.OUTCOME, "ok")
            return True

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        """No more updates of ``uri`` for this client connection (a no-op if it had none)."""
        uri = str(params.uri)
        with self._span("gateway.resource.unsubscribe", ctx, uri) as span:
            if not _matches(uri, self._patterns(ctx, "resources")):
                span.set_attribute(attr.OUTCOME, "refused")
                raise _not_found(uri)
            connection = _connection(ctx)
            for upstream in self.gateway.upstreams:
                await upstream.relays.subscriptions.unsubscribe(
                    uri, connection, await live(upstream)
                )
            span.set_attribute(attr.OUTCOME, "ok")
            return types.EmptyResult()

    @contextmanager
    def _span(self, name: str, ctx: ServerRequestContext[Any, Any], uri: str) -> Iterator[Any]:
        """A span for one request about ``uri``: principal, session and URI masked as the guard's
        call spans are, with the same key (unrecorded without one)."""
        principal, session_id = self.identity(ctx)
        with self.tracer.start_as_current_span(name) as span:
            masker = self.masker
            if masker is not None:
                span.set_attribute(attr.PRINCIPAL, masker.principal(principal))
                span.set_attribute(attr.GEN_AI_CONVERSATION_ID, masker.identifier(session_id))
                span.set_attribute("gateway.resource.uri", masker.mask_text(uri))
            yield span

    async def _owner(self, uri: str) -> tuple[Upstream, Client] | None:
        """The one upstream claiming ``uri`` (see ``_claimants``); None when none does, or when
        several do (one upstream must not answer for another's URI, as two may not offer one tool
        name)."""
        claimants = await self._claimants(uri)
        if len(claimants) > 1:
            names = ", ".join(upstream.name for upstream, _ in claimants)
            log.warning("resource %s is offered by several upstreams (%s): refused", uri, names)
            return None
        return claimants[0] if claimants else None

    async def _claimants(self, uri: str) -> list[tuple[Upstream, Client]]:
        """The upstream that returned ``uri`` as a link, else those listing it, else those
        declaring a template it matches."""
        serving = await self._serving("resources")
        for upstream, client in serving:
            if uri in upstream.relays.links:
                return [(upstream, client)]
        listing = [
            (upstream, client)
            for upstream, client in serving
            if any(str(r.uri) == uri for r in await _all(client, "list_resources", "resources"))
        ]
        if not listing:
            listing = [
                (upstream, client)
                for upstream, client in serving
                if any(
                    _template(t.uri_template).fullmatch(uri)
                    for t in await _all(client, "list_resource_templates", "resource_templates")
                )
            ]
        return listing

    # -- prompts and completions ------------------------------------------------------------------

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        allowed = self._patterns(ctx, "prompts")
        found: list[types.Prompt] = []
        for upstream, client in await self._serving("prompts"):
            for prompt in await _all(client, "list_prompts", "prompts"):
                exposed = upstream.config.exposed(prompt.name)
                if _matches(exposed, allowed):
                    found.append(prompt.model_copy(update={"name": exposed}))
        return types.ListPromptsResult(prompts=found)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        upstream, client, name = await self._prompt(ctx, params.name)
        result = await _relayed(upstream, client.get_prompt(name, params.arguments))
        self._seen_untrusted(*self.identity(ctx))
        return result

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        ref = params.ref
        argument = {"name": params.argument.name, "value": params.argument.value}
        context = params.context.arguments if params.context is not None else None
        if isinstance(ref, types.PromptReference):
            upstream, client, name = await self._prompt(ctx, ref.name)
            upstream_ref: types.PromptReference | types.ResourceTemplateReference = ref.model_copy(
                update={"name": name}
            )
        else:
            if not _matches(ref.uri, self._patterns(ctx, "resources")):
                raise _not_found(ref.uri)
            owner = await self._template_owner(ref.uri)
            if owner is None:
                raise _not_found(ref.uri)
            (upstream, client), upstream_ref = owner, ref
        return await _relayed(upstream, client.complete(upstream_ref, argument, context))

    async def _prompt(
        self, ctx: ServerRequestContext[Any, Any], exposed: str
    ) -> tuple[Upstream, Client, str]:
        if _matches(exposed, self._patterns(ctx, "prompts")):
            for upstream, client in await self._serving("prompts"):
                for prompt in await _all(client, "list_prompts", "prompts"):
                    if upstream.config.exposed(prompt.name) == exposed:
                        return upstream, client, prompt.name
        raise MCPError(types.INVALID_PARAMS, f"No prompt named {exposed!r}")

    async def _template_owner(self, uri_template: str) -> tuple[Upstream, Client] | None:
        for upstream, client in await self._serving("resources"):
            templates = await _all(client, "list_resource_templates", "resource_templates")
            if any(t.uri_template == uri_template for t in templates):
                return upstream, client
        return None

    # -- logging ----------------------------------------------------------------------------------

    async def set_level(
        self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        """Accepted, not applied: a handshake-era client gets every level the upstream sends (a
        2026-07-28 client's per-request opt-in level is applied by the SDK)."""
        return types.EmptyResult()

    # -- shared -----------------------------------------------------------------------------------

    def _seen_untrusted(self, principal: str, session_id: str) -> None:
        """The model is about to read text an upstream wrote: the session is tainted, as after a
        tool with ``untrusted_output``, so a write that follows is gated like one."""
        guard = self.gateway.guards.get(principal)
        ttl = guard.policy.session_ttl if guard is not None else 86_400.0
        key = taint_key(session_id)
        self.gateway.stores.counters.incr(key, now=self.gateway.now(), ttl=ttl)

    def _patterns(self, ctx: ServerRequestContext[Any, Any], kind: str) -> tuple[str, ...]:
        principal, _ = self.identity(ctx)
        config = self.gateway.config.principals.get(principal)
        return tuple(getattr(config, kind, ())) if config is not None else ()

    async def _serving(self, capability: str) -> list[tuple[Upstream, Client]]:
        """The upstreams that declare ``capability``, each with its live client."""
        serving: list[tuple[Upstream, Client]] = []
        for upstream in self.gateway.upstreams:
            try:
                client = await upstream.client()
            except ConnectionError as err:
                log.warning("upstream %s: %s", upstream.name, err)
                continue
            if getattr(client.server_capabilities, capability, None) is not None:
                serving.append((upstream, client))
        return serving


async def _all(client: Client, method: str, field_name: str) -> list[Any]:
    """Every page of a listing (bounded, like the tool listing); none from an upstream that
    declares the capability but not this method (templates, say), rather than its error."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        try:
            page = await getattr(client, method)(cursor=cursor, cache_mode="refresh")
        except MCPError as err:
            if err.code == types.METHOD_NOT_FOUND:
                return items
            raise
        items.extend(getattr(page, field_name))
        cursor = page.next_cursor
        if not cursor:
            break
    return items


async def _relayed(upstream: Upstream, request: Awaitable[_T]) -> _T:
    """The upstream's answer, or its JSON-RPC error passed on as the same error."""
    try:
        return await request
    except MCPError:
        raise
    except Exception as err:
        raise MCPError(types.INTERNAL_ERROR, f"upstream {upstream.name} failed: {err}") from err


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The client connection (one MCP session) a request came on: where its updates go."""
    connection: Connection = ctx.session._connection  # the SDK keeps it private; see server.py
    return connection


def _tracing(observer: Any) -> TracerSink | None:
    """The observer's OpenTelemetry sink, if it has one."""
    for sink in getattr(observer, "sinks", ()):
        if isinstance(sink, TracerSink):
            return sink
    return None


def _matches(value: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(value, pattern) for pattern in patterns)


def _template(uri_template: str) -> re.Pattern[str]:
    """A URI template (RFC 6570, the simple ``{var}`` form) as a pattern: one segment per variable."""
    parts = re.split(r"\{[^}]*\}", uri_template)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


def _not_found(uri: str) -> MCPError:
    # The same answer for "not there" and "not yours": a refusal must not confirm a URI exists.
    return MCPError(RESOURCE_NOT_FOUND, f"Resource not found: {uri}")
