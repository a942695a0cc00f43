"""An upstream written with the SDK's low-level server API, served over streamable HTTP on 127.0.0.1.

``python raw_upstream.py PORT``. Its ``malformed`` tool answers with a result that is not a valid
CallToolResult, which the high-level server API cannot produce.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.context import ServerRequestContext

TOOLS = [
    types.Tool(
        name="lookup",
        description="Look up a customer by email.",
        input_schema={
            "type": "object",
            "properties": {"email": {"type": "string", "minLength": 3}},
            "required": ["email"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="tagged",
        description="A schema a typed model cannot hold (patternProperties).",
        input_schema={
            "type": "object",
            "properties": {
                "tag": {"type": "object", "patternProperties": {"^x": {"type": "integer"}}}
            },
        },
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
    types.Tool(
        name="malformed",
        description="Answers with garbage.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True),
    ),
]


async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(
    ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
) -> Any:
    if params.name == "malformed":
        return {"content": "not a list of blocks", "isError": "maybe"}
    email = (params.arguments or {}).get("email", "")
    return types.CallToolResult(
        content=[types.TextContent(text='{"customer_id": "CUS-1", "tier": "gold"}')],
        structured_content={"customer_id": "CUS-1", "email": email, "tier": "gold"},
    )


def main() -> None:
    server = Server("crm", on_list_tools=list_tools, on_call_tool=call_tool)
    app = server.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")


if __name__ == "__main__":
    main()
