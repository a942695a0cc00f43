"""Regex classes whose meaning depends on the engine: refused in tool schemas at build time.

A tool's argument patterns are checked twice with two engines: pydantic-core validates with Rust's
``regex`` crate, where ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are Unicode-aware (``\\d`` matches
fullwidth U+FF11, Arabic-Indic U+0661 and Devanagari U+0967), while the model reads the published JSON
Schema, whose patterns are ECMA-262, where ``\\d`` is ``[0-9]``. An id that the schema rejects would
then pass validation and reach a backend as a different string than any reviewer expects. So
these constructs are refused where the spec is declared, with the ASCII spelling to use instead:

- the shorthand classes ``\\d \\D \\w \\W \\s \\S`` and the word boundaries ``\\b \\B``;
- Unicode property classes ``\\p{..}`` / ``\\P{..}`` (ECMA-262 has them only with the ``u`` flag);
- inline flag groups such as ``(?i)`` (ECMA-262 has no inline flags; Rust folds case by Unicode
  rules, so ``(?i)k`` matches the Kelvin sign).

Explicit ASCII ranges (``[0-9]``, ``[A-Za-z0-9_]``, ``[ \\t\\n\\r]``) mean the same in every engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

__all__ = ["ambiguous_constructs", "schema_patterns"]

_SPELLED = {
    "d": "[0-9]",
    "D": "[^0-9]",
    "w": "[A-Za-z0-9_]",
    "W": "[^A-Za-z0-9_]",
    "s": "[ \\t\\n\\r\\f\\v]",
    "S": "[^ \\t\\n\\r\\f\\v]",
    "b": "an explicit ASCII boundary",
    "B": "an explicit ASCII boundary",
    "p": "an explicit ASCII class",
    "P": "an explicit ASCII class",
}

_FLAGS = re.compile(r"\(\?[a-zA-Z-]+[:)]")
"""An inline flag group; ``(?P<name>``, ``(?:``, ``(?=``, ``(?!``, ``(?<`` are groups, not flags."""


def ambiguous_constructs(pattern: str) -> list[str]:
    """What in ``pattern`` two regex engines read differently, each with its ASCII replacement."""
    found: list[str] = []
    chars = iter(pattern)
    for char in chars:
        if char != "\\":
            continue
        escaped = next(chars, "")  # the character after a backslash is never itself an escape
        if escaped in _SPELLED:
            found.append(f"\\{escaped} (write {_SPELLED[escaped]})")
    stripped = re.sub(r"\\.", "", pattern)
    found += [
        f"{flag.group()} (inline flags differ by engine)" for flag in _FLAGS.finditer(stripped)
    ]
    return found


def schema_patterns(schema: Any, pointer: str = "") -> Iterator[tuple[str, str]]:
    """Every regex in a JSON Schema, as (JSON pointer to it, pattern): ``pattern`` values and the
    keys of ``patternProperties``, at any depth (``$defs``, ``items``, ``anyOf``...)."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            here = f"{pointer}/{key}"
            if key == "pattern" and isinstance(value, str):
                yield here, value
            elif key == "patternProperties" and isinstance(value, dict):
                for regex, sub in value.items():
                    yield f"{here}/{regex}", regex
                    yield from schema_patterns(sub, f"{here}/{regex}")
            elif key not in ("properties", "$defs") or not isinstance(value, dict):
                yield from schema_patterns(value, here)
            else:  # names of properties and definitions are not keywords: never read as one
                for name, sub in value.items():
                    yield from schema_patterns(sub, f"{here}/{name}")
    elif isinstance(schema, list):
        for index, item in enumerate(schema):
            yield from schema_patterns(item, f"{pointer}/{index}")
