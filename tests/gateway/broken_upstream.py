"""A hand-written JSON-RPC stdio server that breaks the protocol on purpose (no SDK: the SDK won't).

It handshakes properly, lists one read-only tool, and answers every ``tools/call`` with a result
that is not a CallToolResult (``content`` is a string).
"""

from __future__ import annotations

import json
import sys

TOOL = {
    "name": "garbage",
    "description": "Answers with a malformed result.",
    "inputSchema": {"type": "object", "properties": {}},
    "annotations": {"readOnlyHint": True},
}


def answer(request_id: object, result: object = None, error: object = None) -> None:
    message = {"jsonrpc": "2.0", "id": request_id}
    message.update({"error": error} if error is not None else {"result": result})
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    request = json.loads(line)
    method, request_id = request.get("method"), request.get("id")
    if request_id is None:
        continue  # notifications
    if method == "initialize":
        answer(
            request_id,
            {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "broken", "version": "0"},
            },
        )
    elif method == "tools/list":
        answer(request_id, {"tools": [TOOL]})
    elif method == "tools/call":
        answer(
            request_id, {"content": "this is not a list of content blocks", "isError": "perhaps"}
        )
    else:
        answer(request_id, error={"code": -32601, "message": f"no method {method}"})
