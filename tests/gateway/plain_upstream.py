"""An upstream whose tools declare no annotations at all (as many published servers do)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("plain")


@app.tool(description="Look something up.")
def lookup(key: str) -> str:
    return f"value of {key}"


if __name__ == "__main__":
    app.run()
