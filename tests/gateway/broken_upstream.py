"""A hand-written JSON-RPC stdio server that breaks the protocol on purpose (no SDK: the SDK won't).

It handshakes properly and lists three tools: ``garbage`` answers with a result that is not a
CallToolResult (``content`` is a string); ``refuse_closed`` and ``refuse_timeout`` answer with the
JSON-RPC errors -32000 and -32001, the codes the SDK also uses for its own closed-connection and
timeout errors. Every call is counted, one line each, in the file ``BROKEN_CALLS`` names.
"""

from __future__ import annotations

import json
import os
import sys

TOOL = {
    "name": "garbage",
    "description": "Answers with a malformed result.",
    "inputSchema": {"type": "object", "properties": {}},
    "annotations": {"readOnlyHint": True},
}
REFUSING = [
    {
        "name": name,
        "description": f"Answers JSON-RPC error {code}.",
        "inputSchema": {"type": "object"},
    }
    for name, code in (("refuse_closed", -32000), ("refuse_timeout", -32001))
]
CODES = {"refuse_closed": (-32000, "Connection closed"), "refuse_timeout": (-32001, "Busy")}


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
        answer(request_id, {"tools": [TOOL, *REFUSING]})
    elif method == "tools/call" and request["params"]["name"] in CODES:
        if os.environ.get("BROKEN_CALLS"):
            with open(os.environ["BROKEN_CALLS"], "a") as calls:
                calls.write(request["params"]["name"] + "\n")
        code, message = CODES[request["params"]["name"]]
        answer(request_id, error={"code": code, "message": message})
    elif method == "tools/call":
        answer(
            request_id, {"content": "this is not a list of content blocks", "isError": "perhaps"}
        )
    else:
        answer(request_id, error={"code": -32601, "message": f"no method {method}"})
