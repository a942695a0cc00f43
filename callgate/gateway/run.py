"""Running the gateway: open the stores, start the upstreams, serve over stdio or streamable HTTP."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.stdio import stdio_server

from callgate.approvals import list_actions, open_stores
from callgate.gateway._downstream import DuplicateKeys, FilteredLines, event_loop_stdio
from callgate.gateway._fastcall import FastCalls, Lines
from callgate.gateway.config import GatewayConfig
from callgate.gateway.gateway import Gateway
from callgate.gateway.pins import open_pin_store
from callgate.gateway.server import build_server
from callgate.gateway.sessions import session_of
from guard import Clock, Observer
from guard.stores import Stores
from telemetry.auth import BearerAuth, BearerTokens, is_loopback

__all__ = ["running", "serve_http", "serve_stdio"]

log = logging.getLogger("callgate.gateway")


@asynccontextmanager
async def running(
    config: GatewayConfig, *, observer: Observer | None = None, clock: Clock | None = None
) -> AsyncIterator[Gateway]:
    """A started gateway (upstreams connected, pins checked, approvals watched) until the block ends."""
    opened: Stores | None = open_stores(config.store) if config.store else None
    try:
        if opened is not None:
            stores = opened
            pins = open_pin_store(config.store, getattr(opened, "client", None))
        else:
            stores, pins = Stores.memory(), open_pin_store(None)
        gateway = Gateway(config, stores=stores, pins=pins, observer=observer, clock=clock)
        async with anyio.create_task_group() as group:
            await gateway.start(group)
            if opened is not None:  # a restart keeps watching what the last process left pending
                gateway.adopt(list_actions(opened))  # pending to watch, denied to remember
            watcher = anyio.CancelScope()
            watching = anyio.Event()

            async def watch() -> None:
                try:
                    with watcher:
                        await gateway.watch_approvals()
                finally:
                    watching.set()

            group.start_soon(watch)
            try:
                yield gateway
            finally:
                # The approved runs in progress end before their upstreams do, even when the
                # gateway is itself being cancelled (the watcher bounds how long that takes).
                with anyio.CancelScope(shield=True):
                    watcher.cancel()
                    await watching.wait()
                    await gateway.stop()
                group.cancel_scope.cancel()
    finally:
        if opened is not None:
            opened.close()


async def serve_stdio(gateway: Gateway) -> None:
    """Serve on this process's stdin/stdout for the one configured stdio principal."""
    principal = gateway.config.stdio_principal
    if principal is None:
        raise ValueError("serve.stdio.principal is not set: stdio needs one configured principal")
    session_id = f"stdio-{uuid.uuid4().hex[:16]}"
    server = build_server(gateway, lambda ctx: (principal, session_of(ctx, principal, session_id)))
    # Duplicate JSON keys are caught in the raw text, before the SDK's parser merges them; stdin
    # and stdout are read and written on the event loop where they can be (no thread per line),
    # and there plain tools/call requests take the lean path (_fastcall) past the SDK's server.
    async with event_loop_stdio() as pipes:
        stdin, stdout = pipes if pipes is not None else (FilteredLines(), None)
        fast: FastCalls | None = None
        if pipes is not None and gateway.config.serve.stdio.lean:
            fast = FastCalls(
                gateway,
                server,
                principal=principal,
                transport_session=session_id,
                lines=Lines(pipes[1].writer),
            )
            pipes[0].taken, pipes[1].written = fast.offer, fast.answered
        try:
            # Duck-typed: the SDK iterates stdin's lines and awaits stdout's write and flush.
            async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
                options = server.create_initialization_options(
                    NotificationOptions(tools_changed=True)
                )
                await server.run(read_stream, write_stream, options)
        finally:
            if fast is not None:
                with anyio.CancelScope(shield=True):
                    await fast.aclose()


async def serve_http(
    gateway: Gateway,
    *,
    host: str | None = None,
    port: int | None = None,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve streamable HTTP; every request needs a configured bearer token (401 otherwise)."""
    import uvicorn

    http = gateway.config.http
    host = host or http.host
    port = http.port if port is None else port
    tokens = BearerTokens((t.token, t.principal) for t in http.tokens)
    if not tokens:
        raise ValueError(
            "serve.http.tokens is empty: HTTP needs bearer tokens mapped to principals"
        )
    if not is_loopback(host):
        log.warning(
            "serving on %s, beyond this machine: bearer tokens required on every request", host
        )

    def identity(ctx: ServerRequestContext[Any, Any]) -> tuple[str, str]:
        headers = getattr(ctx.request, "headers", None) or {}
        principal = tokens.verify(headers.get("authorization"))
        if principal is None:  # the middleware let nobody through without a token; belt and braces
            raise PermissionError("no valid bearer token")
        transport = headers.get("mcp-session-id") or f"http:{principal}"
        return principal, session_of(ctx, principal, transport)

    server = build_server(gateway, identity)
    app = server.streamable_http_app(streamable_http_path=http.path, host=host)
    guarded = BearerAuth(DuplicateKeys(app), tokens, realm="callgate-gateway")
    uv = uvicorn.Server(
        uvicorn.Config(guarded, host=host, port=port, log_level="warning", lifespan="on")
    )
    if ready is None:
        await uv.serve()
        return
    async with anyio.create_task_group() as group:
        group.start_soon(uv.serve)
        while not uv.started:
            await anyio.sleep(0.02)
        bound = uv.servers[0].sockets[0].getsockname()[1] if uv.servers else port
        ready(int(bound))
