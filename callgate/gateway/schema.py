"""An upstream tool's ``inputSchema`` (JSON Schema) as a strict pydantic model, or a refusal by name.

The guard's own schema stage does the validating, so the gateway only translates. Three layers:

1. **Typed**: what maps onto a pydantic type keeping its meaning becomes that type: ``type`` (one or
   a list), ``properties``/``required``, ``additionalProperties`` (``false``, ``true`` or a schema:
   ``dict[str, T]``), ``items``, ``prefixItems`` of a fixed length (a tuple), ``anyOf`` and
   ``oneOf`` (a union), a one-element ``allOf``, local ``$ref`` into ``$defs``, ``enum``/``const``,
   the string, number and array bounds, ``default``, ``nullable`` (OpenAPI), and the annotations
   that check nothing (``title``, ``description``, ``format``, ``discriminator``, ...).
2. **Checked**: what a pydantic type approximates is also checked, exactly, by a JSON Schema
   validator (``jsonschema``, draft 2020-12) on the value as it will be sent: ``oneOf`` (exactly
   one, unless its options cannot overlap, as a discriminated union's cannot), ``uniqueItems``,
   ``multipleOf``, ``min/maxProperties``, ``propertyNames``, ``dependentRequired``, ``contains``,
   an ``enum`` of non-string values, a schema without a type. The check sits on the property that
   needs it (the root's own keywords on the root), because jsonschema costs about a millisecond
   for a whole SDK schema and tens of microseconds for one property.
   A call passes only if both agree, so nothing the upstream's schema forbids reaches it.
3. **Refused** by name at startup (``UnsupportedSchema``), under ``strict: true`` (the default):
   keywords whose validity depends on combinations a typed model cannot hold (``not``,
   ``if``/``then``/``else``, ``patternProperties``, ``dependentSchemas``, ``unevaluated*``, a
   several-part ``allOf``, a recursive ``$ref``, a ``prefixItems`` of open length, a ``false``
   schema), and any keyword the translation does not know, because an ignored keyword is a check
   the upstream expects and nobody makes. A ``$ref`` outside the document is refused always: the
   gateway never fetches schemas.

A relaxed tool (``strict: false`` in the config) takes a refused part as a JSON value checked by
``jsonschema`` against that part (passed on unchanged), ignores unknown keywords as JSON Schema
does, and puts a lax pre-pass in front: unknown fields dropped and values coerced ("25" for an
integer) before the strict check.

Two deliberate differences from plain JSON Schema, both stricter: an object that declares
``properties`` without ``additionalProperties`` is closed (unknown fields are refused, the guard's
rule), and ``5.0`` is not an integer (no coercion).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from callgate.gateway._jsoncheck import exclusive, value_check, whole_check

__all__ = ["UnsupportedSchema", "model_from_schema"]

_ANNOTATIONS = frozenset(
    {
        "title",
        "description",
        "examples",
        "format",
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "discriminator",
        "contentMediaType",
        "contentEncoding",
    }
)
_NUMERIC = {
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
}
_STRING = {"minLength": "min_length", "maxLength": "max_length", "pattern": "pattern"}
_ARRAY = {"minItems": "min_length", "maxItems": "max_length"}
_CHECKED = frozenset(
    {
        "multipleOf",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "dependentRequired",
        "contains",
        "minContains",
        "maxContains",
    }
)
"""Assertions no pydantic type makes: checked by jsonschema beside the typed model."""
_UNTYPED = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "patternProperties",
        "dependentSchemas",
        "unevaluatedProperties",
        "unevaluatedItems",
        "$dynamicRef",
        "$dynamicAnchor",
    }
)
"""Keywords refused under ``strict: true``; checked whole by jsonschema under ``strict: false``."""
_KNOWN = (
    _ANNOTATIONS
    | _CHECKED
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
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "definitions",
        "items",
        "prefixItems",
        "default",
        "nullable",
    }
)
_SCALARS: dict[str, Any] = {"string": str, "integer": int, "boolean": bool, "null": type(None)}
_FAMILIES = {"string": _STRING, "integer": _NUMERIC, "number": _NUMERIC, "array": _ARRAY}


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
    model = _Translator(name, schema, extra="forbid", strict=strict).root_model(_model_name(name))
    if strict:
        return model
    # The pre-pass only coerces and drops; the checks are the strict model's, after it.
    lax = _Translator(name, schema, extra="ignore", strict=False, checks=False)
    return _relaxed(model, lax.root_model(_model_name(name)))


class _Translator:
    def __init__(
        self,
        tool: str,
        root: Mapping[str, Any],
        *,
        extra: Literal["forbid", "ignore"],
        strict: bool,
        checks: bool = True,
    ) -> None:
        self.tool = tool
        self.root = root
        self.extra = extra
        self.strict = strict
        self.defs: Mapping[str, Any] = {
            **(root.get("definitions") or {}),
            **(root.get("$defs") or {}),
        }
        self.resolving: list[str] = []
        self.needs_check = False
        """Set while translating a property when some part of it is only approximated by its type:
        that property's value is then checked against its schema (``_checked``)."""
        self.checks = checks
        """False for the relaxed pre-pass, which coerces and drops and leaves checking to the rest."""

    def refuse(self, path: str, reason: str) -> UnsupportedSchema:
        return UnsupportedSchema(f"tool {self.tool!r}: {reason} at {path or '/'} (not supported)")

    def root_model(self, model_name: str) -> type[BaseModel]:
        if stray := self.unsupported(self.root):
            self.untyped(self.root, "", f"keyword {stray!r}")
        own = self.needs_check or bool(_CHECKED & set(self.root))
        model = self.object_model(model_name, self.root, "", root=True)
        if not (self.checks and own):
            return model
        # The root's own keywords only: each property was checked, where needed, as a field.
        names = {key: True for key in self.root.get("properties") or {}}
        validators: dict[str, Any] = {
            "json_schema": model_validator(mode="after")(
                whole_check(self.with_defs({**self.root, "properties": names}))
            )
        }
        whole: type[BaseModel] = create_model(
            model.__name__, __base__=model, __validators__=validators
        )
        return whole

    def object_model(
        self, model_name: str, schema: Mapping[str, Any], path: str, *, root: bool = False
    ) -> type[BaseModel]:
        extra = schema.get("additionalProperties", False)
        if root and extra is not False:
            raise self.refuse(path, "additionalProperties other than false on the arguments")
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        if missing := required - set(properties):
            raise self.refuse(path, f"required names undeclared properties {sorted(missing)}")
        fields: dict[str, Any] = {}
        outer = self.needs_check
        for index, (key, sub) in enumerate(properties.items()):
            self.needs_check = False
            annotation, nullable = self.annotation(sub, f"{path}/{key}", f"{model_name}_{index}")
            if self.needs_check and self.checks:
                annotation = self.checked(annotation, sub)
            name, alias = key, None
            if not _IDENTIFIER.match(key) or key.startswith("_") or key in _RESERVED:
                # pydantic cannot hold this name: the field gets another, the key is its alias
                name, alias = f"field_{index}", key
                while name in properties or name in fields:
                    name += "_"
            fields[name] = (annotation, self.field(sub, key in required, nullable, alias))
        self.needs_check = outer
        if extra is not False:
            self.needs_check = self.needs_check or extra is not True
        # An object with properties is closed unless it says otherwise: the guard's rule.
        kept: Literal["forbid", "ignore", "allow"] = "allow" if extra is not False else self.extra
        model: type[BaseModel] = create_model(
            model_name,
            __config__=ConfigDict(
                extra=kept,
                regex_engine="python-re",  # the same regular expressions as jsonschema's
                serialize_by_alias=True,
                validate_by_alias=True,
                validate_by_name=False,
            ),
            **fields,
        )
        return model

    def field(self, schema: Any, required: bool, nullable: bool, alias: str | None) -> Any:
        options: dict[str, Any] = {} if alias is None else {"alias": alias}
        if isinstance(schema, Mapping) and isinstance(schema.get("description"), str):
            options["description"] = schema["description"]
        if required:
            return Field(**options)
        if isinstance(schema, Mapping) and "default" in schema:
            return Field(default=schema["default"], **options)
        # Absent stays absent: a non-nullable optional field the caller left out is not sent as null.
        if nullable:
            return Field(default=None, **options)
        return Field(default=None, exclude_if=_is_none, **options)

    def annotation(self, schema: Any, path: str, model_name: str) -> tuple[Any, bool]:
        """The type for ``schema`` and whether it admits null."""
        if schema is True:
            return Any, True
        if schema is False:
            return self.untyped(schema, path, "a false schema")
        if not isinstance(schema, Mapping):
            raise self.refuse(path, "a schema that is not an object")
        if stray := self.unsupported(schema):
            return self.untyped(schema, path, f"keyword {stray!r}")
        if _CHECKED & set(schema):
            self.needs_check = True
        annotation, nullable = self.shaped(schema, path, model_name)
        if schema.get("nullable") is True and not nullable:
            return Union[annotation, None], True  # noqa: UP007
        return annotation, nullable

    def shaped(self, schema: Mapping[str, Any], path: str, model_name: str) -> tuple[Any, bool]:
        if "$ref" in schema:
            return self.reference(schema, path, model_name)
        if "allOf" in schema:
            parts = schema["allOf"]
            if not isinstance(parts, list) or len(parts) != 1:
                return self.untyped(schema, path, "an allOf of several schemas")
            return self.annotation(parts[0], f"{path}/allOf/0", model_name)
        if "const" in schema:
            return self.enumerated([schema["const"]], schema)
        if "enum" in schema:
            if not isinstance(schema["enum"], list) or not schema["enum"]:
                raise self.refuse(path, "an empty enum")
            return self.enumerated(schema["enum"], schema)
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                # oneOf's "exactly one" is checked unless the options cannot overlap
                if keyword == "oneOf" and not self.exclusive(schema[keyword]):
                    self.needs_check = True
                return self.union(schema, keyword, path, model_name)
        kinds = schema.get("type")
        if kinds is None:
            # Valid JSON Schema (constraints on whatever the value is): the root check enforces it.
            self.needs_check = self.needs_check or bool(set(schema) - _ANNOTATIONS - {"default"})
            return Any, True
        if isinstance(kinds, list):
            if not kinds:
                raise self.refuse(path, "an empty type list")
            parts = [self.annotation(_for_kind(schema, kind), path, model_name) for kind in kinds]
            return Union[tuple(part for part, _ in parts)], any(n for _, n in parts)  # noqa: UP007
        return self.typed(kinds, schema, path, model_name), kinds == "null"

    def typed(self, kind: str, schema: Mapping[str, Any], path: str, model_name: str) -> Any:
        if kind == "object":
            if "properties" not in schema:
                self.needs_check = self.needs_check or bool(schema.get("required"))
                value, _ = self.annotation(schema.get("additionalProperties", True), path, "")
                return dict[str, value]  # type: ignore[valid-type]
            return self.object_model(model_name, schema, path)
        if kind == "array":
            return self.array(schema, path, model_name)
        if kind == "number":
            return Union[  # noqa: UP007
                self.constrained(int, schema, _NUMERIC, path),
                self.constrained(float, schema, _NUMERIC, path),
            ]
        if kind not in _SCALARS:
            raise self.refuse(path, f"type {kind!r}")
        if kind == "integer":
            return self.constrained(int, schema, _NUMERIC, path)
        if kind == "string":
            return self.constrained(str, schema, _STRING, path)
        return _SCALARS[kind]

    def array(self, schema: Mapping[str, Any], path: str, model_name: str) -> Any:
        prefix = schema.get("prefixItems")
        if prefix is None:
            item, _ = self.annotation(schema.get("items", True), f"{path}/items", model_name + "_i")
            return self.constrained(list[item], schema, _ARRAY, path)  # type: ignore[valid-type]
        size = len(prefix) if isinstance(prefix, list) else -1
        closed = schema.get("items") is False or schema.get("maxItems") == size
        if size <= 0 or not closed or schema.get("minItems", 0) != size:
            return self.untyped(schema, path, "a prefixItems of open length")[0]
        items = [
            self.annotation(sub, f"{path}/prefixItems/{i}", f"{model_name}_{i}")[0]
            for i, sub in enumerate(prefix)
        ]
        return tuple[tuple(items)]  # type: ignore[misc]

    def enumerated(self, values: list[Any], schema: Mapping[str, Any]) -> tuple[Any, bool]:
        if all(isinstance(v, str) for v in values):
            self.needs_check = self.needs_check or schema.get("type", "string") != "string"
            return Literal[tuple(values)], False
        # JSON equality (1 == 1.0, true != 1) is jsonschema's: the root check decides.
        self.needs_check = True
        return Any, None in values

    def constrained(
        self, base: Any, schema: Mapping[str, Any], allowed: dict[str, str], path: str
    ) -> Any:
        stray = {k for k in schema if k in _NUMERIC or k in _STRING or k in _ARRAY} - set(allowed)
        if stray:
            raise self.refuse(path, f"{sorted(stray)} on a {schema.get('type')}")
        options = {allowed[k]: v for k, v in schema.items() if k in allowed}
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if isinstance(schema.get(key), bool):
                raise self.refuse(path, f"a boolean {key} (draft 4)")
        if "pattern" in options:
            try:
                re.compile(options["pattern"])
            except re.error as err:
                raise self.refuse(path, f"a pattern Python cannot compile ({err})") from err
        if not options:
            return base
        return Annotated[base, Field(**options)]

    def union(
        self, schema: Mapping[str, Any], keyword: str, path: str, model_name: str
    ) -> tuple[Any, bool]:
        options = schema[keyword]
        if not isinstance(options, list) or not options:
            raise self.refuse(path, f"an empty {keyword}")
        # Siblings of the union (a shared type, say) apply to every option.
        shared = {k: v for k, v in schema.items() if k not in (keyword, "default", "nullable")}
        parts = [
            self.annotation(
                {**shared, **sub} if isinstance(sub, Mapping) else sub,
                f"{path}/{keyword}/{i}",
                f"{model_name}_{i}",
            )
            for i, sub in enumerate(options)
        ]
        return Union[tuple(part for part, _ in parts)], any(n for _, n in parts)  # noqa: UP007

    def reference(self, schema: Mapping[str, Any], path: str, model_name: str) -> tuple[Any, bool]:
        ref = schema["$ref"]
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", str(ref))
        if match is None or match.group(2) not in self.defs:
            # Never fetched, whatever strict says: the gateway does not load schemas from afar.
            raise self.refuse(path, f"$ref {ref!r} (only local #/$defs/... references)")
        if ref in self.resolving:
            return self.untyped(schema, path, f"recursive $ref {ref!r}")
        siblings = set(schema) - _ANNOTATIONS - {"$ref", "default"}
        self.needs_check = self.needs_check or bool(siblings)
        self.resolving.append(ref)
        try:
            return self.annotation(self.defs[match.group(2)], path, _model_name(match.group(2)))
        finally:
            self.resolving.pop()

    def checked(self, annotation: Any, schema: Any) -> Any:
        """``annotation`` whose validated value, as it will be sent, ``schema`` also accepts."""
        return value_check(annotation, self.with_defs(schema), schema)

    def with_defs(self, schema: Any) -> Any:
        """``schema`` standing alone: the root's definitions beside it, for its references."""
        if not isinstance(schema, Mapping) or not self.defs:
            return schema
        return {"$defs": dict(self.defs), "definitions": dict(self.defs), **schema}

    def exclusive(self, options: Any) -> bool:
        return exclusive(options, self.defs)

    def unsupported(self, schema: Mapping[str, Any]) -> str | None:
        """The first keyword strict mode refuses (unknown, or one a typed model cannot hold)."""
        known = _KNOWN if self.strict else _KNOWN | _UNTYPED | set(schema)
        stray = sorted((set(schema) - known) | (set(schema) & _UNTYPED))
        return stray[0] if stray else None

    def untyped(self, schema: Any, path: str, what: str) -> tuple[Any, bool]:
        """Strict: a refusal naming ``what``. Relaxed: any JSON value, the root check enforces it."""
        if self.strict:
            raise self.refuse(path, what)
        self.needs_check = True
        return Any, True


def _for_kind(schema: Mapping[str, Any], kind: Any) -> dict[str, Any]:
    """One member of a type list: the bounds of the other types' families do not apply to it."""
    own = _FAMILIES.get(kind, {}) if isinstance(kind, str) else {}
    others = (set(_NUMERIC) | set(_STRING) | set(_ARRAY)) - set(own)
    return {**{k: v for k, v in schema.items() if k not in others}, "type": kind}


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
