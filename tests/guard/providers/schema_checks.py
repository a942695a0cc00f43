"""Checks shared by the provider tests: schema walking and JSON Schema validity."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["assert_valid_schema", "subschemas"]


def subschemas(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every schema node of a strict schema (which nests only through these three keywords)."""
    yield schema
    for sub in schema.get("properties", {}).values():
        yield from subschemas(sub)
    if isinstance(schema.get("items"), dict):
        yield from subschemas(schema["items"])
    for sub in schema.get("anyOf", []):
        yield from subschemas(sub)


def assert_valid_schema(schema: dict[str, Any], valid: dict[str, Any]) -> None:
    """The schema is valid draft 2020-12, accepts ``valid`` and rejects it with an extra field."""
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    assert validator.is_valid(valid), list(validator.iter_errors(valid))
    assert not validator.is_valid({**valid, "force": True})
