"""A local OpenAI-compatible Chat Completions server with scripted answers, on 127.0.0.1.

The script maps a conversation's first user message to the assistant messages to send, one per
round: round ``n`` (the number of assistant messages already in the request) gets ``script[n]``, and
past the end the model answers in text. Every request body is kept for assertions.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tool_call(call_id: str, name: str, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    """One ``tool_calls`` entry as the API sends it (arguments always JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def calls(*entries: dict[str, Any]) -> dict[str, Any]:
    """An assistant message proposing ``entries``."""
    return {"role": "assistant", "content": None, "tool_calls": list(entries)}


@dataclass
class FakeOpenAI:
    """What the server answers and what it was asked."""

    script: dict[str, Sequence[dict[str, Any]]]
    api_key: str | None = None
    fail_with: int | None = None
    redirect: tuple[int, str] | None = None
    """(status, Location) to answer every POST with instead of a completion."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages", [])
        first = next((m.get("content") for m in messages if m.get("role") == "user"), "")
        rounds = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.script.get(str(first), ())
        if rounds < len(steps):
            message = steps[rounds]
        else:
            message = {"role": "assistant", "content": "Done."}
        return {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }


@contextmanager
def serve(fake: FakeOpenAI) -> Iterator[FakeOpenAI]:
    """Run ``fake`` on a free port of 127.0.0.1 for the ``with`` block; ``fake.url`` is its base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            """A client that turned a redirected POST into a GET: recorded, refused."""
            fake.requests.append(
                {"method": "GET", "path": self.path, "auth": self.headers.get("Authorization")}
            )
            self._send(405, {"error": {"message": "POST only"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            fake.requests.append(
                {
                    "method": "POST",
                    "path": self.path,
                    "body": body,
                    "auth": self.headers.get("Authorization"),
                }
            )
            if fake.redirect is not None and not self.path.startswith("/followed"):
                status, location = fake.redirect
                self.send_response(status)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif fake.fail_with is not None:
                self._send(fake.fail_with, {"error": {"message": "scripted failure"}})
            elif (
                fake.api_key is not None
                and self.headers.get("Authorization") != f"Bearer {fake.api_key}"
            ):
                self._send(401, {"error": {"message": "bad key"}})
            elif self.path.split("?")[0] not in ("/v1/chat/completions", "/followed"):
                self._send(404, {"error": {"message": "no such route"}})
            else:
                self._send(200, fake.answer(body))

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
