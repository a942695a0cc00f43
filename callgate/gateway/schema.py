"""An upstream tool's ``inputSchema`` (JSON Schema) as a strict pydantic model, or a refusal by name.

The guard's own schema stage does the validating, so the gateway only translates: each keyword the
translation understands becomes a pydantic constraint, and a schema using any keyword it does not
understand is refused at startup (``UnsupportedSchema``) rather than silently accepted, because an
ignored keyword is a check the upstream expects and nobody makes.

The supported subset: ``type`` (one or a list), ``properties``, ``required``,
``additionalProperties: false``, ``enum``, ``const``, ``anyOf``, local ``$ref`` into ``$defs`` (not
recursive), ``items``, ``minItems``/``maxItems``, ``minLength``/``maxLength``, ``pattern``,
``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``/``multipleOf``, ``default``, and the
annotations that check nothing (``title``, ``description``, ``examples``, ``format``, ``$schema``,
``deprecated``, ``readOnly``, ``writeOnly``; ``format`` is an annotation in draft 2020-12).

A relaxed tool (``strict: false`` in the config) gets the same model behind a lax pre-pass:
unknown fields are dropped and values coerced ("25" for an integer) before the strict check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

__all__ = ["UnsupportedSchema", "model_from_schema"]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "format",
        "$schema",
        "$id",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
_NUMERIC = {
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "multipleOf": "multiple_of",
}
_STRING = {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"}
_ARRAY = {"minItems": "min_length", "maxItems": "max_length"}
_SCALARS: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "null": type(None),
}
_KNOWN = (
    _ANNOTATIONS
    | set(_NUMERIC)
    | set(_STRING)
    | set(_ARRAY)
    | {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "definitions",
        "items",
        "default",
    }
)


class UnsupportedSchema(ValueError):
    """The schema uses something the gateway cannot validate; the message names it and where."""


def model_from_schema(
    name: str, schema: Mapping[str, Any], *, strict: bool = True
) -> type[BaseModel]:
    """The argument model for tool ``name``; raises ``UnsupportedSchema`` naming the keyword."""
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema(f"tool {name!r}: inputSchema is not an object")
    if schema.get("type", "object") != "object":
        raise UnsupportedSchema(f"tool {name!r}: the root of inputSchema must be type object")
    model = _Translator(name, schema, extra="forbid").object_model(_model_name(name), schema, "")
    if strict:
        return model
    lax = _Translator(name, schema, extra="ignore").object_model(_model_name(name), schema, "")
    return _relaxed(model, lax)


class _Translator:
    def __init__(
        self, tool: str, root: Mapping[str, Any], *, extra: Literal["forbid", "ignore"]
    ) -> None:
        self.tool = tool
        self.extra = extra
        self.defs: Mapping[str, Any] = {
            **(root.get("definitions") or {}),
            **(root.get("$defs") or {}),
        }
        self.resolving: list[str] = []

    def refuse(self, path: str, reason: str) -> UnsupportedSchema:
        return UnsupportedSchema(f"tool {self.tool!r}: {reason} at {path or '/'} (not supported)")

    def object_model(
        self, model_name: str, schema: Mapping[str, Any], path: str
    ) -> type[BaseModel]:
        self.check_keywords(schema, path)
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            raise self.refuse(path, "additionalProperties other than false")
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        if missing := required - set(properties):
            raise self.refuse(path, f"required names undeclared properties {sorted(missing)}")
        fields: dict[str, Any] = {}
        for key, sub in properties.items():
            if not _IDENTIFIER.match(key) or key.startswith("_") or key in _RESERVED:
                raise self.refuse(f"{path}/{key}", "a property name pydantic cannot hold")
            annotation, nullable = self.annotation(sub, f"{path}/{key}", f"{model_name}_{key}")
            fields[key] = (annotation, self.field(sub, key in required, nullable))
        model: type[BaseModel] = create_model(
            model_name, __config__=ConfigDict(extra=self.extra), **fields
        )
        return model

    def field(self, schema: Mapping[str, Any], required: bool, nullable: bool) -> Any:
        options: dict[str, Any] = {}
        if isinstance(schema.get("description"), str):
            options["description"] = schema["description"]
        if required:
            return Field(**options)
        if "default" in schema:
            return Field(default=schema["default"], **options)
        # Absent stays absent: a non-nullable optional field the caller left out is not sent as null.
        if nullable:
            return Field(default=None, **options)
        return Field(default=None, exclude_if=_is_none, **options)

    def annotation(self, schema: Any, path: str, model_name: str) -> tuple[Any, bool]:
        """The type for ``schema`` and whether it admits null."""
        if schema is True or schema == {}:
            raise self.refuse(path, "a schema that accepts anything")
        if not isinstance(schema, Mapping):
            raise self.refuse(path, "a schema that is not an object")
        self.check_keywords(schema, path)
        if "$ref" in schema:
            return self.reference(schema, path, model_name)
        if "const" in schema:
            return Literal[schema["const"]], schema["const"] is None
        if "enum" in schema:
            values = tuple(schema["enum"])
            if not values or not all(isinstance(v, str | int | bool) or v is None for v in values):
                raise self.refuse(path, "an enum of values other than strings, numbers and null")
            return Literal[values], None in values
        if "anyOf" in schema:
            return self.union(schema["anyOf"], path, model_name)
        kinds = schema.get("type")
        if kinds is None:
            raise self.refuse(path, "a schema without a type")
        if isinstance(kinds, list):
            if not kinds:
                raise self.refuse(path, "an empty type list")
            parts = [self.annotation({**schema, "type": kind}, path, model_name) for kind in kinds]
            return Union[tuple(part for part, _ in parts)], any(n for _, n in parts)  # noqa: UP007
        return self.typed(kinds, schema, path, model_name), kinds == "null"

    def typed(self, kind: str, schema: Mapping[str, Any], path: str, model_name: str) -> Any:
        if kind == "object":
            return self.object_model(model_name, schema, path)
        if kind == "array":
            if "items" not in schema:
                raise self.refuse(path, "an array without items")
            item, _ = self.annotation(schema["items"], f"{path}/items", model_name + "_item")
            return self.constrained(list[item], schema, _ARRAY, path)  # type: ignore[valid-type]
        if kind not in _SCALARS:
            raise self.refuse(path, f"type {kind!r}")
        if kind in ("integer", "number"):
            return self.constrained(_SCALARS[kind], schema, _NUMERIC, path)
        if kind == "string":
            return self.constrained(str, schema, _STRING, path)
        return _SCALARS[kind]

    def constrained(
        self, base: Any, schema: Mapping[str, Any], allowed: dict[str, str], path: str
    ) -> Any:
        stray = {k for k in schema if k in _NUMERIC or k in _STRING or k in _ARRAY} - set(allowed)
        if stray:
            raise self.refuse(path, f"{sorted(stray)} on a {schema.get('type')}")
        options = {allowed[k]: v for k, v in schema.items() if k in allowed}
        if "pattern" in options:
            try:
                re.compile(options["pattern"])
            except re.error as err:
                raise self.refuse(path, f"a pattern Python cannot compile ({err})") from err
        if not options:
            return base
        from typing import Annotated

        return Annotated[base, Field(**options)]

    def union(self, options: Any, path: str, model_name: str) -> tuple[Any, bool]:
        if not isinstance(options, list) or not options:
            raise self.refuse(path, "an empty anyOf")
        parts = [
            self.annotation(sub, f"{path}/anyOf/{i}", f"{model_name}_{i}")
            for i, sub in enumerate(options)
        ]
        return Union[tuple(part for part, _ in parts)], any(n for _, n in parts)  # noqa: UP007

    def reference(self, schema: Mapping[str, Any], path: str, model_name: str) -> tuple[Any, bool]:
        ref = schema["$ref"]
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", str(ref))
        if match is None or match.group(2) not in self.defs:
            raise self.refuse(path, f"$ref {ref!r} (only local #/$defs/... references)")
        if ref in self.resolving:
            raise self.refuse(path, f"recursive $ref {ref!r}")
        self.resolving.append(ref)
        try:
            return self.annotation(self.defs[match.group(2)], path, _model_name(match.group(2)))
        finally:
            self.resolving.pop()

    def check_keywords(self, schema: Mapping[str, Any], path: str) -> None:
        unknown = sorted(set(schema) - _KNOWN)
        if unknown:
            raise self.refuse(path, f"keyword {unknown[0]!r}")


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = frozenset(dir(BaseModel))


def _is_none(value: Any) -> bool:
    return value is None


def _model_name(tool: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[^A-Za-z0-9]+", tool) if part) or "Args"


def _relaxed(model: type[BaseModel], lax: type[BaseModel]) -> type[BaseModel]:
    """``model`` behind a lax pass: unknown fields dropped, values coerced, then checked strictly."""

    def coerce(cls: type[BaseModel], data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        try:
            loose = lax.model_validate(data)
        except ValidationError:
            return data  # the strict pass names the problems
        return loose.model_dump(exclude_unset=True)

    validators: dict[str, Any] = {"coerce_first": model_validator(mode="before")(coerce)}
    relaxed: type[BaseModel] = create_model(
        model.__name__, __base__=model, __validators__=validators
    )
    return relaxed
