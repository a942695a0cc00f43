"""Producing the observed calls with a model behind any OpenAI-compatible Chat Completions endpoint.

The model gets the case's messages, an optional system prompt, and the tools its principal may call,
in the provider's format from the same registry the guard validates against. Every call it proposes
runs through the case's guard and the guard's answer goes back as the tool message, until the model
answers without a tool call or ``max_steps`` rounds have passed: the calls are those a real agent loop
behind callgate would have made.

One plain HTTPS POST per round with the standard library: the wire format is four fields, and no SDK
call would make it more correct. The key (and any userinfo, sent as HTTP Basic credentials) goes
only to the base URL's origin: a redirect is followed only when it stays on that origin and keeps
the POST (307, 308); any other is an error naming where it pointed. Every URL in a message is
redacted (``callgate.evaluation.redact``), so no credential reaches the output or the database.
"""

from __future__ import annotations

import base64
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import Message
from typing import IO, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from callgate.evaluation.redact import redact_url, same_origin, scrub, url_secrets
from guard.providers import openai_chat_tools, parse_openai_chat, render_openai_chat
from guard.result import ToolResult

__all__ = ["ChatModel", "ModelError", "tool_definitions"]


class ModelError(RuntimeError):
    """The endpoint did not answer with a chat completion."""


def tool_definitions(guard: Any, role: str) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` list for what ``role`` may call (strict where the schema allows)."""
    policy = guard.policy.role(role)
    allowed = policy.tools if policy else frozenset()
    return openai_chat_tools([spec for spec in guard.registry.values() if spec.name in allowed])


@dataclass(frozen=True, kw_only=True, repr=False)
class ChatModel:
    """A model name at an OpenAI-compatible base URL (``http://127.0.0.1:8000/v1``)."""

    model: str
    base_url: str
    """May carry credentials (userinfo, ``?api-key=``): they are never shown, repr included."""
    api_key: str | None = None
    system: str | None = None
    temperature: float | None = None
    timeout: float = 60.0
    max_steps: int = 8

    def __repr__(self) -> str:
        key = "***" if self.api_key else None
        url = redact_url(self.base_url)
        return f"ChatModel(model={self.model!r}, base_url={url!r}, api_key={key})"

    def converse(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]],
        run: Callable[[str, str], ToolResult],
    ) -> list[tuple[str, str]]:
        """The (name, arguments) of every call the model proposes; ``run`` answers each one."""
        history: list[dict[str, Any]] = []
        if self.system:
            history.append({"role": "system", "content": self.system})
        history.extend(messages)
        proposed: list[tuple[str, str]] = []
        for _ in range(self.max_steps):
            message = self._complete(history, tools)
            calls = parse_openai_chat(message)
            if not calls:
                break
            history.append(message)
            for call in calls:
                proposed.append((call.name, call.arguments))
                history.append(render_openai_chat(run(call.name, call.arguments), call.call_id))
        return proposed

    def _complete(
        self, history: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": history}
        if tools:
            body["tools"] = tools
        if self.temperature is not None:
            body["temperature"] = self.temperature
        shown = redact_url(self.base_url)
        secrets = (*url_secrets(self.base_url), *((self.api_key,) if self.api_key else ()))
        try:
            request = urllib.request.Request(
                self._endpoint(),
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"} | self._credentials(),
                method="POST",
            )
            with _OPENER.open(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            error.close()  # its body is the open connection
            raise ModelError(scrub(_http_failure(shown, error), secrets)) from None
        except (OSError, http.client.HTTPException, ValueError) as error:  # URLError is an OSError
            # ``from None``: the standard library's exception quotes the URL as it was given.
            raise ModelError(scrub(f"{shown}: {error}", secrets)) from None
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as error:
            raise ModelError(f"{shown} sent no choices[0].message") from error
        if not isinstance(message, dict):
            raise ModelError(f"{shown} sent a message that is not an object")
        message.setdefault("role", "assistant")
        return message

    def _endpoint(self) -> str:
        """``<base URL>/chat/completions`` without userinfo, the query kept where it belongs."""
        parts = urlsplit(self.base_url)
        netloc = parts.netloc.rpartition("@")[2]
        path = parts.path.rstrip("/") + "/chat/completions"
        return urlunsplit((parts.scheme, netloc, path, parts.query, ""))

    def _credentials(self) -> dict[str, str]:
        """The Authorization header: the API key, else the base URL's userinfo as Basic."""
        if self.api_key:
            return {"Authorization": f"Bearer {self.api_key}"}
        userinfo, at, _ = urlsplit(self.base_url).netloc.rpartition("@")
        if not at:
            return {}
        user, _, password = userinfo.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}


def _http_failure(shown: str, error: urllib.error.HTTPError) -> str:
    if 300 <= error.code < 400:
        target = redact_url(error.headers.get("Location") or "") if error.headers else ""
        return (
            f"{shown} redirected (HTTP {error.code}) to {target or 'nowhere'}: not followed,"
            " the credentials go only to the base URL's origin and only with the POST kept"
        )
    return f"{shown} answered HTTP {error.code}"


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same origin and only when it keeps the method and body.

    The standard handler forwards every header, ``Authorization`` included, to wherever a 30x
    points, and turns a POST into a body-less GET on 301-303. Returning None makes the 30x an
    ``HTTPError`` that ``_complete`` reports.
    """

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        if code not in (307, 308) or not same_origin(req.full_url, newurl):
            return None
        return urllib.request.Request(
            newurl,
            data=req.data,
            headers=dict(req.header_items()),
            method=req.get_method(),
        )


_OPENER = urllib.request.build_opener(_SameOriginRedirects)
