"""Stage 2: the arguments are one JSON object that every reader reads the same way."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from guard.call import Call
from guard.codes import Code
from guard.result import ToolResult
from guard.stages.base import Env, reject

__all__ = ["MAX_ARGUMENT_BYTES", "MAX_DEPTH", "MAX_SAFE_INTEGER", "ParseStage"]

MAX_ARGUMENT_BYTES = 64 * 1024
"""The default of ``Policy.max_argument_bytes``: larger argument texts are refused unparsed."""

MAX_DEPTH = 32
"""Objects and arrays nested deeper are refused: no tool's arguments need it, and every later reader
(validation, masking, the trail, a backend) would otherwise have to survive it."""


class _Ambiguous(ValueError):
    """Text that JSON parsers disagree about (RFC 8259 leaves it undefined): refused, not guessed."""


def _no_constants(name: str) -> NoReturn:
    # json.loads accepts NaN and Infinity, which are not JSON and no backend should receive.
    raise _Ambiguous(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: Infinity spelt as a number
        raise _Ambiguous(f"{text[:20]} is out of range")
    return value


MAX_SAFE_INTEGER = 2**53 - 1
"""Integers beyond this are read differently by parsers that hold numbers as doubles (every
JavaScript UI an approver may use): 9007199254740993 shows as ...992. RFC 7493 (I-JSON) range."""


def _interoperable(text: str) -> int:
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    raise _Ambiguous(f"integer {text[:24]} is beyond +/-2^53-1; send it as a string")


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate keys: Python keeps the last, other parsers the first; a reviewer, a log and the
    # executor could each read a different value. Refused at every level, naming the key.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Ambiguous(f"duplicate key {json.dumps(key)[:40]}")
            seen.add(key)
    return obj


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique,
    parse_constant=_no_constants,
    parse_float=_finite,
    parse_int=_interoperable,
)
"""Built once: ``json.loads`` with options builds a new decoder on every call."""

_SCAN = _DECODER.scan_once  # type: ignore[attr-defined]  # set in __init__, untyped in typeshed
_SPACE = " \t\n\r"


def _decode(raw: str) -> Any:
    """``_DECODER.decode(raw)`` without its Python wrapper and its two regex matches: the C scanner
    directly, with JSON's four whitespace characters stripped around the value."""
    start = len(raw) - len(raw.lstrip(_SPACE))
    try:
        value, end = _SCAN(raw, start)
    except StopIteration as stop:
        raise json.JSONDecodeError("Expecting value", raw, stop.value) from None
    if end != len(raw) and (tail := raw[end:].lstrip(_SPACE)):
        raise json.JSONDecodeError("Extra data", raw, len(raw) - len(tail))
    return value


@dataclass(frozen=True, kw_only=True, slots=True)
class ParseStage:
    """Decodes ``call.raw_arguments`` into ``call.parsed``; anything but an unambiguous object is refused.

    Unambiguous: no duplicate keys, no NaN or infinite numbers, no integers beyond what a double
    holds exactly, no strings that UTF-8 cannot carry (lone surrogates), nesting at most
    ``MAX_DEPTH`` deep."""

    env: Env
    name: str = "parse"

    def __call__(self, call: Call) -> ToolResult | None:
        raw = call.raw_arguments
        if raw is None:
            return reject(call, Code.INVALID_JSON, "Arguments are missing: send a JSON object.")
        if len(raw) > (limit := self.env.policy.max_argument_bytes):
            return reject(
                call,
                Code.INVALID_JSON,
                f"Arguments are too large ({len(raw)} characters; the limit is {limit}). "
                "Send only the fields needed.",
            )
        try:
            parsed = _decode(raw)
            _check_text(raw, parsed)
        except (ValueError, RecursionError) as error:
            where = f" ({error})" if isinstance(error, json.JSONDecodeError | _Ambiguous) else ""
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


def _check_text(raw: str, parsed: Any) -> None:
    """Raise ``_Ambiguous`` for nesting beyond ``MAX_DEPTH`` or a string UTF-8 cannot carry.

    Cheap filters first, so the common call pays a few C-speed scans of its text: nesting needs
    that many brackets, and a lone surrogate is either a literal one (the text is not ASCII) or a
    ``\\u`` escape."""
    if raw.count("{") + raw.count("[") > MAX_DEPTH and _depth(parsed) > MAX_DEPTH:
        raise _Ambiguous(f"nested deeper than {MAX_DEPTH} levels")
    if not raw.isascii() or "\\u" in raw:
        try:
            json.dumps(parsed, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise _Ambiguous("a string is not valid Unicode (a lone surrogate)") from None


def _depth(value: Any) -> int:
    """Nesting depth, iteratively: the value may be as deep as the decoder allowed."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in node)
    return deepest


def _kind(value: object) -> str:
    kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")
