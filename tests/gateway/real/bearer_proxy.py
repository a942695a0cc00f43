"""A relay on 127.0.0.1 that adds a bearer token to every request, for clients that cannot send one
(the conformance suite): the gateway's HTTP transport always requires a token.

Usage: ``python bearer_proxy.py PORT TARGET_URL TOKEN``. Requests, responses and SSE streams pass
through unchanged otherwise, the client's ``Host`` and ``Origin`` included (the suite checks that
the server refuses rebinding hosts).
"""

from __future__ import annotations

import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "upgrade",
    "te",
    "trailer",
}


def app(target: str, token: str) -> Starlette:
    client = httpx.AsyncClient(timeout=httpx.Timeout(60, read=None))

    async def relay(request: Request) -> StreamingResponse:
        headers = [
            (k, v) for k, v in request.headers.items() if k.lower() not in HOP | {"authorization"}
        ]
        headers.append(("authorization", f"Bearer {token}"))
        outgoing = client.build_request(
            request.method, target, headers=headers, content=await request.body()
        )
        answer = await client.send(outgoing, stream=True)
        return StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers={k: v for k, v in answer.headers.items() if k.lower() not in HOP},
            background=BackgroundTask(answer.aclose),
        )

    return Starlette(routes=[Route("/mcp", relay, methods=["GET", "POST", "DELETE"])])


def main() -> None:
    port, target, token = sys.argv[1:]
    uvicorn.run(app(target, token), host="127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    main()
