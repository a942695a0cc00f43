"""An upstream whose one write records its effect, then hangs while ``HANG_FILE`` exists.

The gateway's crash test kills the gateway while this write hangs: the payment was made, the
answer never came. The process writes its pid to ``PID_FILE`` so the test can end it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("bank")
Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))


@app.tool(
    description="Pay an invoice once. The bank does not deduplicate repeated requests.",
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False
    ),
)
async def pay(invoice: str) -> dict[str, Any]:
    with open(os.environ["EFFECTS_FILE"], "a") as handle:
        handle.write(f"paid {invoice}\n")
    while Path(os.environ["HANG_FILE"]).exists():  # paid, not answered: the gateway dies here
        await anyio.sleep(0.05)
    return {"paid": invoice}


if __name__ == "__main__":
    app.run()
