"""A handshake-era upstream offering resource subscriptions, and tools to drive and inspect them:
``touch`` announces a URI changed (to the subscriber, if there is one), ``subscriptions`` says which
URIs are subscribed now, ``pid`` names the process (a test kills it to force a reconnect)."""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

RESOURCES = ["docs://a", "docs://b", "docs://c", "secret://key"]

_READ = types.ToolAnnotations(read_only_hint=True)
_URI = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
_NONE: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    types.Tool(
        name="touch", description="Announce a change.", input_schema=_URI, annotations=_READ
    ),
    types.Tool(
        name="subscriptions", description="Subscribed URIs.", input_schema=_NONE, annotations=_READ
    ),
    types.Tool(name="pid", description="This process.", input_schema=_NONE, annotations=_READ),
]

subscribed: dict[str, Any] = {}
"""URI -> the session that subscribed (the gateway's one connection)."""


async def list_resources(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri=uri, name=uri.split("//")[1]) for uri in RESOURCES]
    )


async def read_resource(
    ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, text=f"about {uri}")]
    )


async def subscribe(
    ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
) -> types.EmptyResult:
    subscribed[str(params.uri)] = ctx.session
    return types.EmptyResult()


async def unsubscribe(
    ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
) -> types.EmptyResult:
    subscribed.pop(str(params.uri), None)
    return types.EmptyResult()


async def list_tools(
    ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "touch":
        uri = str(arguments["uri"])
        session = subscribed.get(uri)
        if session is not None:
            await session.send_resource_updated(uri)
        said = "touched" if session is not None else "nobody subscribed"
    elif params.name == "subscriptions":
        said = json.dumps(sorted(subscribed))
    else:
        said = str(os.getpid())
    return types.CallToolResult(content=[types.TextContent(type="text", text=said)])


server = Server(
    "watched",
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=unsubscribe,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
