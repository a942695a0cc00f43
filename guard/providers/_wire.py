"""Text on the wire: arguments coming in, results going out. Shared by the provider modules."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import to_jsonable_python

from guard.result import ToolResult

__all__ = [
    "answer_id",
    "arguments_text",
    "mappings",
    "name_text",
    "optional_id",
    "result_payload",
    "result_text",
]


def arguments_text(value: Any) -> str:
    """A model-written field as text: strings as they are, JSON values dumped, None as ``""``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not JSON at all (a provider would never send it)
        return ""


def mappings(value: Any, what: str) -> list[Mapping[str, Any]]:
    """A provider's list of objects, checked; anything else is a caller bug, not a model error."""
    if not isinstance(value, list | tuple):
        raise ValueError(f"expected {what} as a list, got {type(value).__name__}")
    for item in value:
        if not isinstance(item, Mapping):
            kind = type(item).__name__
            raise ValueError(f"expected each entry of {what} to be an object, got {kind}")
    return list(value)


def name_text(value: Any) -> str:
    """A tool name as the model sent it; ``""`` when there was none (the guard: UNKNOWN_TOOL)."""
    return value if isinstance(value, str) else ""


def optional_id(value: Any) -> str | None:
    """A call id as text, or None when the provider object had none."""
    return None if value is None else str(value)


def result_payload(result: ToolResult) -> dict[str, Any]:
    """``ToolResult.for_model()`` as JSON values, whatever a host put in a result it built.

    The guard's own results already hold JSON (``ToolSpec.visible``); a hand-built one may hold
    models, dates or worse. Rendering never raises: what pydantic cannot dump is named by its
    type, and data that cannot be dumped at all (invalid UTF-8 bytes, a cycle) is dropped."""
    payload = result.for_model()
    try:
        jsonable: dict[str, Any] = to_jsonable_python(
            payload, inf_nan_mode="null", fallback=_opaque
        )
    except ValueError:
        payload["data"] = {"unrenderable": True}
        jsonable = to_jsonable_python(payload, inf_nan_mode="null", fallback=_opaque)
    return jsonable


def result_text(result: ToolResult) -> str:
    """What the model reads in the tool-result message: ``result_payload`` as JSON text."""
    return json.dumps(result_payload(result), ensure_ascii=False)


def _opaque(value: Any) -> str:
    return f"<{type(value).__name__}>"


def answer_id(result: ToolResult, call_id: str | None) -> str:
    """The id the tool-result message quotes: the one given, else the result's own."""
    answer = call_id if call_id is not None else result.call_id
    if answer is None:
        raise ValueError("a tool result must quote the call id it answers; none was given")
    return answer
