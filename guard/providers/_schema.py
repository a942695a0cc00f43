"""Argument schemas as providers accept them, derived from the tool's pydantic model.

Two renderings of ``ToolSpec.json_schema`` (pydantic's draft 2020-12 schema):

- ``neutral_schema``: the schema as pydantic made it, minus ``title`` annotations (pydantic's
  prettified field names, which the model already sees as the property keys), and with a root
  ``$ref`` (pydantic's form for a recursive model) replaced by the object it names, because every
  provider wants ``"type": "object"`` at the root. Anthropic, MCP and OpenAI's non-strict mode take
  it as it is.
- ``strict_schema``: OpenAI's strict subset (Structured Outputs), or None when the schema cannot be
  expressed in it. The walk, node by node:

  1. ``$ref`` and one-element ``allOf`` are inlined (their sibling keywords, such as a field's
     description, win); a recursive reference cannot be inlined, so the schema is not strict.
  2. Every object lists all its properties in ``required`` and gets ``additionalProperties: false``;
     an object that admits other keys (a ``dict`` field, ``extra='allow'``) is not strict, while
     a nested model that merely ignores extra keys is closed (the model loses nothing it could use).
     An optional field that admits null (``str | None = None``) is already a union with null, so
     the model sends null to leave it out. A non-nullable field with a default is not made
     nullable (the model would then send a null the argument model rejects): it becomes required
     and its default goes to the description.
  3. Annotations the strict subset rejects (``title``, ``default``, ``examples``...) are dropped;
     ``oneOf`` becomes ``anyOf`` (a discriminated union is exclusive anyway).
  4. Constraints the subset does not support (``minLength``, ``maxLength``, ``uniqueItems``, a
     ``format`` outside the list, a ``pattern`` with lookaround...) are moved into the description,
     so the model still reads them; the guard's schema stage enforces them regardless.
  5. Any keyword not known here, a schema without a type (``Any``) or composition the subset lacks
     (``not``, ``if``, ``prefixItems``...) makes the schema not strict: the caller then sends the
     neutral schema with ``strict: false`` rather than a schema the API would refuse or misread.

The supported keywords follow OpenAI's Structured Outputs guide ("Supported schemas"), as
pydantic-ai's OpenAI strict transformer also applies it: strings
``pattern`` and ``format`` (a fixed list), numbers ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum``, ``multipleOf``, arrays ``minItems``, ``maxItems``, plus ``enum``, ``const``,
``anyOf`` and ``description``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from guard.registry import ToolSpec

__all__ = ["iter_specs", "neutral_schema", "strict_schema"]

# Keywords whose value is one subschema, a list of subschemas, or a name -> subschema mapping.
_ONE_SCHEMA = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
)
_SCHEMA_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAP = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")

_STRICT_KEPT = frozenset(
    {
        "type",
        "description",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
"""Copied as they are (``pattern`` and ``format`` are kept too, after a check)."""
_STRICT_DROPPED = frozenset(
    {"title", "default", "examples", "$schema", "$comment", "deprecated", "readOnly", "writeOnly"}
)
"""Annotations: no constraint is lost by dropping them (defaults are noted separately)."""
_STRICT_NOTED = frozenset(
    {"minLength", "maxLength", "uniqueItems", "minProperties", "maxProperties", "contentEncoding"}
)
"""Constraints strict mode does not take: moved into the description, enforced by the guard."""
_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")


class _NotStrict(Exception):
    """The schema has something OpenAI's strict subset cannot express."""


def iter_specs(specs: Iterable[ToolSpec] | Mapping[str, ToolSpec]) -> list[ToolSpec]:
    """The specs to render, from a list of specs or a ``ToolRegistry`` (which iterates names)."""
    return list(specs.values() if isinstance(specs, Mapping) else specs)


def neutral_schema(spec: ToolSpec) -> dict[str, Any]:
    """The argument schema without ``title`` annotations: a fresh copy the caller may change."""
    cleaned: dict[str, Any] = _strip_titles(spec.json_schema)
    ref = cleaned.get("$ref")
    defs = cleaned.get("$defs", {})
    if isinstance(ref, str) and ref.removeprefix("#/$defs/") in defs:
        # The definition stays in $defs too: the recursive references inside it point there.
        root = copy.deepcopy(defs[ref.removeprefix("#/$defs/")])
        cleaned = {**root, **{key: value for key, value in cleaned.items() if key != "$ref"}}
    return cleaned


def strict_schema(spec: ToolSpec) -> dict[str, Any] | None:
    """The argument schema in OpenAI's strict subset, or None if it has no faithful strict form."""
    root = copy.deepcopy(spec.json_schema)
    defs = root.pop("$defs", {})
    try:
        strict = _strict_node(root, defs, seen=())
    except _NotStrict:
        return None
    return strict if strict.get("type") == "object" else None


def _strip_titles(node: Any) -> Any:
    """Copy a schema without its ``title`` keywords, touching schema positions only.

    A property that happens to be called ``title`` lives under ``properties`` and is kept.
    """
    if not isinstance(node, dict):
        return copy.deepcopy(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in _ONE_SCHEMA:
            out[key] = _strip_titles(value)
        elif key in _SCHEMA_LIST and isinstance(value, list):
            out[key] = [_strip_titles(item) for item in value]
        elif key in _SCHEMA_MAP and isinstance(value, dict):
            out[key] = {name: _strip_titles(item) for name, item in value.items()}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _strict_node(node: Any, defs: dict[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    """One schema node in strict form; ``seen`` holds the definitions being inlined (for cycles)."""
    if not isinstance(node, dict):
        raise _NotStrict("boolean schema")
    node, seen = _inline(node, defs, seen)
    if not any(key in node for key in ("type", "anyOf", "oneOf", "enum", "const")):
        raise _NotStrict("a schema without a type accepts anything")
    out: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in node.items():
        if key in _STRICT_KEPT:
            out[key] = value
        elif key in _STRICT_DROPPED:
            if key == "default" and value is not None:
                notes.append(f"default: {json.dumps(value)}")
        elif key in _STRICT_NOTED:
            notes.append(f"{key}: {json.dumps(value)}")
        elif key == "format":
            if value in _STRICT_FORMATS:
                out[key] = value
            else:
                notes.append(f"format: {value}")
        elif key == "pattern":
            if any(token in value for token in _LOOKAROUND):
                notes.append(f"pattern: {value}")
            else:
                out[key] = value
        elif key in ("anyOf", "oneOf"):
            out.setdefault("anyOf", []).extend(_strict_node(item, defs, seen) for item in value)
        elif key == "discriminator":
            continue  # an OpenAPI hint that goes with oneOf; anyOf needs none
        elif key == "items":
            out[key] = _strict_node(value, defs, seen)
        elif key in ("properties", "required", "additionalProperties"):
            continue  # handled below, as a whole
        else:
            raise _NotStrict(f"unsupported keyword {key!r}")
    if _is_object(node):
        out.update(_strict_object(node, defs, seen))
    if notes:
        description = node.get("description")
        extra = "; ".join(notes)
        out["description"] = f"{description} ({extra})" if description else extra
    return out


def _inline(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Replace ``$ref`` (and a one-element ``allOf``) by the schema it names, siblings winning."""
    while "$ref" in node or "allOf" in node:
        if "$ref" in node:
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            ref = node["$ref"]
            name = ref.removeprefix("#/$defs/")
            if name == ref or name not in defs:
                raise _NotStrict(f"reference {ref!r} is not a local definition")
            if name in seen:
                raise _NotStrict(f"recursive reference {ref!r}")
            node, seen = {**defs[name], **siblings}, (*seen, name)
        else:
            parts = node["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                raise _NotStrict("allOf with several schemas")
            siblings = {key: value for key, value in node.items() if key != "allOf"}
            node = {**parts[0], **siblings}
    return node, seen


def _is_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def _strict_object(
    node: dict[str, Any], defs: dict[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    """Properties, all required, and no other keys."""
    # An object declared open, or with no properties at all, means "any keys": no strict form.
    if node.get("additionalProperties", False) is not False:
        raise _NotStrict("an object that admits keys it does not list")
    if "properties" not in node and "additionalProperties" not in node:
        raise _NotStrict("an object without properties admits any keys")
    properties = node.get("properties", {})
    return {
        "properties": {name: _strict_node(sub, defs, seen) for name, sub in properties.items()},
        "required": list(properties),
        "additionalProperties": False,
    }
