"""Stage 2: the arguments are a JSON object."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import NoReturn

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["ParseStage"]

MAX_ARGUMENT_BYTES = 64 * 1024
"""Larger argument texts are refused unparsed: no tool here needs more, and parsing is not free."""


def _no_constants(name: str) -> NoReturn:
    # json.loads accepts NaN and Infinity, which are not JSON and no backend should receive.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)
"""Built once: ``json.loads`` with options builds a new decoder on every call."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParseStage:
    """Decodes ``call.raw_arguments`` into ``call.parsed``; anything but an object is refused."""

    env: Env
    name: str = "parse"

    def __call__(self, call: Call) -> ToolResult | None:
        raw = call.raw_arguments
        if raw is None:
            return reject(call, Code.INVALID_JSON, "Arguments are missing: send a JSON object.")
        if len(raw) > MAX_ARGUMENT_BYTES:
            return reject(
                call, Code.INVALID_JSON, "Arguments are too large; send only the fields needed."
            )
        try:
            parsed = _DECODER.decode(raw)
        except (ValueError, RecursionError) as error:
            where = f" ({error})" if isinstance(error, json.JSONDecodeError) else ""
            return reject(
                call,
                Code.INVALID_JSON,
                f"Arguments are not valid JSON{where}. Send one JSON object with the tool's fields.",
            )
        if not isinstance(parsed, dict):
            return reject(
                call,
                Code.INVALID_JSON,
                f"Arguments must be a JSON object, not {_kind(parsed)}. "
                "Send one object with the tool's fields.",
            )
        call.parsed = parsed
        return None


def _kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")
