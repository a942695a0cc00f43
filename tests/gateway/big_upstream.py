"""A hand-written JSON-RPC stdio server whose ``blob`` tool answers with ``BIG_MB`` megabytes of text.

``blob`` writes the response id last (as the TypeScript SDK does), ``blob_first`` first (as the
Python SDK does); ``small`` answers a few bytes, to show the connection still serves afterwards.
Every call is counted in the file ``BIG_CALLS`` names.
"""

from __future__ import annotations

import json
import os
import sys

SIZE = int(os.environ.get("BIG_MB", "50")) * 1_000_000
TOOLS = [
    {"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}
    for name in ("blob", "blob_first", "small")
]

for line in sys.stdin:
    request = json.loads(line)
    method, request_id = request.get("method"), request.get("id")
    if request_id is None:
        continue
    if method == "initialize":
        result = {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "big", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        name = request["params"]["name"]
        if os.environ.get("BIG_CALLS"):
            with open(os.environ["BIG_CALLS"], "a") as calls:
                calls.write(name + "\n")
        if name.startswith("blob"):
            body = '{"content":[{"type":"text","text":"' + "x" * SIZE + '"}]}'
            envelope = (
                f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{body}}}'
                if name == "blob_first"
                else f'{{"result":{body},"jsonrpc":"2.0","id":{json.dumps(request_id)}}}'
            )
            sys.stdout.write(envelope + "\n")
            sys.stdout.flush()
            continue
        result = {"content": [{"type": "text", "text": "ok"}]}
    else:
        sys.stdout.write(
            json.dumps(
                {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": method}}
            )
            + "\n"
        )
        sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()
