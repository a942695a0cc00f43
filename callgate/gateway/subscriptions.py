"""Resource subscriptions through the gateway: one upstream's subscribers, by URI.

A client subscribes to a URI its principal may read (``proxy`` checks the allowlist and finds the
upstream): with ``resources/subscribe`` on a handshake-era connection (2025-11-25 and before), or
on a ``subscriptions/listen`` stream at 2026-07-28 (``callgate.gateway.listen``). The gateway
subscribes at the upstream once per URI, however many subscribers want it, and unsubscribes when
the last one leaves. An upstream's ``notifications/resources/updated`` goes to the subscribers of
that URI on that upstream, and to no other: a subscriber is one MCP session (the stdio connection,
or one ``mcp-session-id`` over streamable HTTP) or one listen stream, so two sessions of one
principal never see each other's updates. A session that ends drops its subscriptions
(``Connection.exit_stack``), as a listen stream does; a reconnect to the upstream subscribes its
URIs again before any call goes out.

Only a handshake-era upstream that declares ``resources.subscribe`` is subscribed through (a
2026-07-28 upstream delivers updates on ``subscriptions/listen`` streams, which the gateway does not
open), and the gateway declares ``subscribe`` only when one of its upstreams offers it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

if TYPE_CHECKING:
    from mcp import Client
    from mcp.server.connection import Connection

    from callgate.gateway.upstream import Upstream

__all__ = [
    "MAX_PER_SESSION",
    "Subscriber",
    "Subscribers",
    "ends_with",
    "live",
    "offers_subscriptions",
]

log = logging.getLogger("callgate.gateway")

MAX_PER_SESSION = 1000
"""Resource subscriptions one client session may hold on one upstream (each costs the upstream a
subscription and the gateway memory): past it, a subscribe is refused (``INVALID_REQUEST``)."""

_ENDS_WITH = "callgate.gateway.subscriptions"
"""The ``Connection.state`` key marking a connection whose end drops its subscriptions."""


class Subscriber(Protocol):
    """Where a subscription's updates go: a client ``Connection`` (handshake era), or one
    ``subscriptions/listen`` stream (2026-07-28, ``callgate.gateway.listen``)."""

    async def send_resource_updated(self, uri: str) -> None: ...


def offers_subscriptions(client: Client) -> bool:
    """Whether the upstream behind ``client`` takes ``resources/subscribe`` (handshake era only)."""
    resources = client.server_capabilities.resources
    return (
        client.protocol_version not in MODERN_PROTOCOL_VERSIONS
        and resources is not None
        and resources.subscribe is True
    )


class Subscribers:
    """One upstream's resource subscriptions: per URI, the subscribers (client connections or
    listen streams) that asked for it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.offered = False
        """Whether the upstream, as last connected, takes subscriptions."""
        self._by_uri: dict[str, dict[int, Subscriber]] = {}
        self._of: dict[int, set[str]] = {}
        """Per subscriber (by id: the subscriber is held in ``_by_uri``), its URIs here."""
        # Subscribing and unsubscribing at the upstream, and renewing after a reconnect, one at a
        # time: the first subscriber of a URI subscribes upstream, the last one out unsubscribes.
        self._lock = anyio.Lock()

    async def subscribe(self, uri: str, subscriber: Subscriber, client: Client) -> None:
        """``subscriber`` gets ``uri``'s updates; the upstream's error (``MCPError``) if it refuses."""
        async with self._lock:
            mine = self._of.get(id(subscriber), set())
            if uri not in mine and len(mine) >= MAX_PER_SESSION:
                raise MCPError(
                    types.INVALID_REQUEST,
                    f"Too many subscriptions: at most {MAX_PER_SESSION} per session and upstream",
                )
            holders = self._by_uri.get(uri)
            if holders is None:
                await _subscribe(client, uri)
                holders = self._by_uri[uri] = {}
            holders[id(subscriber)] = subscriber
            self._of.setdefault(id(subscriber), set()).add(uri)

    async def unsubscribe(self, uri: str, subscriber: Subscriber, client: Client | None) -> None:
        """``subscriber`` no longer gets ``uri``'s updates; the upstream is told when none does.

        ``client`` is the live upstream connection, or None when there is none (nothing to tell)."""
        async with self._lock:
            holders = self._by_uri.get(uri)
            if holders is None or holders.pop(id(subscriber), None) is None:
                return
            self._forget(subscriber, uri)
            if holders:
                return
            del self._by_uri[uri]
            if client is not None:
                try:
                    await _unsubscribe(client, uri)
                except Exception:  # the client is unsubscribed either way; updates are dropped
                    log.warning("upstream %s: unsubscribe %s failed", self.name, uri, exc_info=True)

    def subscribed(self, subscriber: Subscriber) -> list[str]:
        """The URIs ``subscriber`` is subscribed to here."""
        return sorted(self._of.get(id(subscriber), ()))

    def _forget(self, subscriber: Subscriber, uri: str) -> None:
        mine = self._of.get(id(subscriber))
        if mine is not None:
            mine.discard(uri)
            if not mine:
                del self._of[id(subscriber)]

    async def updated(self, uri: str) -> None:
        """The upstream says ``uri`` changed: tell the subscribers to it here."""
        for subscriber in list(self._by_uri.get(uri, {}).values()):
            await subscriber.send_resource_updated(uri)  # best effort: never raises

    async def renew(self, client: Client) -> None:
        """After a (re)connect: note whether the upstream takes subscriptions, and subscribe to
        every URI a client still wants (a URI the new connection refuses is dropped, with a
        warning: its subscribers would wait for updates that never come)."""
        self.offered = offers_subscriptions(client)
        async with self._lock:
            for uri in list(self._by_uri):
                try:
                    if not self.offered:
                        raise RuntimeError("subscriptions no longer offered")
                    await _subscribe(client, uri)
                except Exception as err:
                    log.warning("upstream %s: %s not subscribed again: %s", self.name, uri, err)
                    for subscriber in self._by_uri.pop(uri).values():
                        self._forget(subscriber, uri)


def ends_with(connection: Connection, upstreams: list[Upstream]) -> None:
    """When the client connection ends, its subscriptions on ``upstreams`` end with it (the
    callback is set once per connection, on its first subscription)."""
    if connection.state.get(_ENDS_WITH):
        return
    connection.state[_ENDS_WITH] = True

    async def ended() -> None:
        for upstream in upstreams:
            subscribers = upstream.relays.subscriptions
            for uri in subscribers.subscribed(connection):
                await subscribers.unsubscribe(uri, connection, await live(upstream))

    connection.exit_stack.push_async_callback(ended)


async def live(upstream: Upstream) -> Client | None:
    """The upstream's client if it is connected now (nothing to unsubscribe from otherwise)."""
    return await upstream.client() if upstream.connected else None


# The session's requests, not ``Client.subscribe_resource``: those are deprecated for the 2026-07-28
# era, which this path never speaks (``offers_subscriptions``).


async def _subscribe(client: Client, uri: str) -> None:
    request = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
    await client.session.send_request(request, types.EmptyResult)


async def _unsubscribe(client: Client, uri: str) -> None:
    request = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
    await client.session.send_request(request, types.EmptyResult)
