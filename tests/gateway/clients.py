"""A gateway started in the test's process and SDK clients that act for chosen principals and sessions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp import Client

from callgate.gateway import Gateway, parse_config, running
from callgate.gateway.results import VERDICT_KEY
from callgate.gateway.server import build_server
from guard import Clock

Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]


@asynccontextmanager
async def started(
    config_text: str, tmp: Path, *, clock: Clock | None = None
) -> AsyncIterator[Gateway]:
    """The gateway of ``config_text`` (written to ``tmp/gateway.yaml``), started."""
    path = tmp / "gateway.yaml"
    path.write_text(config_text)
    async with running(parse_config(config_text, path), clock=clock) as gateway:
        yield gateway


@asynccontextmanager
async def client(
    gateway: Gateway,
    *,
    principal: str = "bot",
    session: str = "conv-1",
    elicit: Elicit | None = None,
    mode: str = "auto",
) -> AsyncIterator[Client]:
    """An SDK client connected in-process, acting for ``principal`` in guard session ``session``."""
    server = build_server(gateway, lambda ctx: (principal, session))
    async with Client(server, elicitation_callback=elicit, mode=mode) as connected:  # type: ignore[arg-type]
        yield connected


def payload(result: types.CallToolResult) -> dict[str, Any]:
    """The guard's verdict (``_meta["callgate"]``) with ``data``: the upstream's result when the
    call went through (its ``structuredContent``, else its one JSON text block), else the refusal's
    details."""
    verdict = dict((result.meta or {})[VERDICT_KEY])
    if verdict["upstream"]:
        verdict["data"] = upstream_data(result)
    return verdict


def upstream_data(result: types.CallToolResult) -> Any:
    """What the upstream answered: its ``structuredContent``, else its one text block as JSON."""
    if result.structured_content is not None:
        return result.structured_content
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if len(texts) != 1:
        return None
    try:
        return json.loads(texts[0])
    except ValueError:
        return {"text": texts[0]}


def answering(approve: bool, asked: list[str]) -> Elicit:
    """An elicitation handler: a human who reads the question and answers ``approve``."""

    async def human(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content={"approve": approve})

    return human


def accepting() -> dict[str, types.ElicitResult]:
    """The input responses of a client that answers the approval question itself: yes."""
    return {"callgate_approval": types.ElicitResult(action="accept", content={"approve": True})}
