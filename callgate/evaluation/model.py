"""Producing the observed calls with a model behind any OpenAI-compatible Chat Completions endpoint.

The model gets the case's messages, an optional system prompt, and the tools its principal may call,
in the provider's format from the same registry the guard validates against. Every call it proposes
runs through the case's guard and the guard's answer goes back as the tool message, until the model
answers without a tool call or ``max_steps`` rounds have passed: the calls are those a real agent loop
behind callgate would have made.

One plain HTTPS POST per round with the standard library: the wire format is four fields, and no SDK
call would make it more correct.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True, kw_only=True)
class ChatModel:
    """A model name at an OpenAI-compatible base URL (``http://127.0.0.1:8000/v1``)."""

    model: str
    base_url: str
    api_key: str | None = None
    system: str | None = None
    temperature: float | None = None
    timeout: float = 60.0
    max_steps: int = 8

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
        request = urllib.request.Request(
            self.base_url.rstrip("/") + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}),
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as error:
            raise ModelError(f"{self.base_url} answered HTTP {error.code}") from error
        except (urllib.error.URLError, TimeoutError, ValueError) as error:
            raise ModelError(f"{self.base_url}: {error}") from error
        try:
            message = answer["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as error:
            raise ModelError(f"{self.base_url} sent no choices[0].message") from error
        if not isinstance(message, dict):
            raise ModelError(f"{self.base_url} sent a message that is not an object")
        message.setdefault("role", "assistant")
        return message
