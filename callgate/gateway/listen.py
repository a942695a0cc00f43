"""``subscriptions/listen`` for 2026-07-28 clients: resource updates and tool listing changes.

A 2026-07-28 client has no MCP session and no standing stream: it opts in to server events with a
``subscriptions/listen`` request whose response is the stream. The gateway honours, per stream:

- ``resourceSubscriptions``: each URI the principal may read that an upstream takes, subscribed at
  that upstream as a handshake-era ``resources/subscribe`` is (``callgate.gateway.subscriptions``);
  a URI it may not read, or that no one upstream takes, is left out of the acknowledgement, as
  the spec has a server do with what it will not deliver;
- ``toolsListChanged``: announced when the gateway's listing changes (a re-pin, a rug pull, an
  upstream's own ``list_changed``).

Prompt and resource listing changes are not relayed, so they are never honoured. The stream's
subscriptions end with it: when the client goes away (which cancels the request) or the gateway
stops. Events are buffered up to ``_BACKLOG`` per stream; a stream whose client stopped reading
past that is ended, and its client re-listens (the spec has no replay).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.streams.memory
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
    event_to_notification,
)

from callgate.gateway.subscriptions import Subscriber, live

if TYPE_CHECKING:
    from callgate.gateway.gateway import Gateway

__all__ = ["Listen"]

log = logging.getLogger("callgate.gateway")

_BACKLOG = 1024
"""Events buffered per stream for a client that reads slowly."""

Subscribe = Callable[[ServerRequestContext[Any, Any], str, Subscriber], Awaitable[bool]]
"""``(ctx, uri, subscriber) -> whether subscribed``: the allowlist and routing of ``proxy``."""


class _Stream:
    """One listen stream as a subscriber: its events queue for the handler to write."""

    def __init__(self, send: anyio.streams.memory.MemoryObjectSendStream[ServerEvent]) -> None:
        self._send = send

    def _put(self, event: ServerEvent) -> None:
        try:
            self._send.send_nowait(event)
        except anyio.WouldBlock:  # the client stopped reading: end its stream
            log.warning("listen stream backlog full; ending the stream")
            self._send.close()
        except anyio.ClosedResourceError:
            pass

    async def send_resource_updated(self, uri: str) -> None:
        self._put(ResourceUpdated(uri=uri))

    async def send_tool_list_changed(self) -> None:
        self._put(ToolsListChanged())


class Listen:
    """The ``subscriptions/listen`` handler of the gateway's downstream server."""

    def __init__(self, gateway: Gateway, subscribe: Subscribe) -> None:
        self.gateway = gateway
        self.subscribe = subscribe

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        if ctx.request_id is None:
            raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        send, receive = anyio.create_memory_object_stream[ServerEvent](_BACKLOG)
        stream = _Stream(send)
        wanted = params.notifications
        uris: list[str] = []
        try:
            for uri in dict.fromkeys(wanted.resource_subscriptions or ()):
                if await self.subscribe(ctx, uri, stream):
                    uris.append(uri)
            if wanted.tools_list_changed:
                self.gateway.listeners[id(stream)] = stream
            honored = types.SubscriptionFilter(
                tools_list_changed=True if wanted.tools_list_changed else None,
                resource_subscriptions=uris or None,
            )
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=ctx.request_id,
            )
            async with receive:
                async for event in receive:
                    await ctx.session.send_notification(
                        event_to_notification(event, meta), related_request_id=ctx.request_id
                    )
        finally:
            with anyio.CancelScope(shield=True):
                send.close()
                self.gateway.listeners.pop(id(stream), None)
                await self._drop(stream)
        return types.SubscriptionsListenResult(_meta=meta)

    async def _drop(self, stream: _Stream) -> None:
        for upstream in self.gateway.upstreams:
            subscribers = upstream.relays.subscriptions
            for uri in subscribers.subscribed(stream):
                await subscribers.unsubscribe(uri, stream, await live(upstream))
