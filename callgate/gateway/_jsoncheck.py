"""The JSON Schema checks beside the typed argument models (``schema``): ``jsonschema``, draft 2020-12.

A check runs after pydantic's validation, on the value as it will be sent (defaults filled, tuples
as arrays), so what is checked is exactly what the upstream receives; a before-validator would also
turn the guard's JSON input into Python input, where a tuple refuses an array.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

from jsonschema import Draft202012Validator
from pydantic import AfterValidator, BaseModel, TypeAdapter

__all__ = ["exclusive", "value_check", "whole_check"]


def whole_check(schema: Mapping[str, Any]) -> Any:
    """A model after-validator: the whole model, as it will be sent, checked against ``schema``."""
    validator = Draft202012Validator(dict(schema))

    def check(value: BaseModel) -> BaseModel:
        sent = type(value).__pydantic_serializer__.to_python(value, mode="json")
        error = next(iter(validator.iter_errors(sent)), None)
        if error is not None:
            raise ValueError(_described(error))
        return value

    return check


def value_check(annotation: Any, standalone: Any, schema: Any) -> Any:
    """``annotation`` whose validated value, as it will be sent, ``standalone`` also accepts.

    ``standalone`` is ``schema`` with the root's definitions beside it; OpenAPI's ``nullable`` (which
    jsonschema does not know) lets null through, as the typed model does."""
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    validator = Draft202012Validator(standalone)
    openapi_null = isinstance(schema, Mapping) and schema.get("nullable") is True

    def check(value: Any) -> Any:
        if value is None and openapi_null:
            return value
        error = next(iter(validator.iter_errors(adapter.dump_python(value, mode="json"))), None)
        if error is not None:
            raise ValueError(_described(error))
        return value

    return Annotated[annotation, AfterValidator(check)]


def exclusive(options: Any, defs: Mapping[str, Any]) -> bool:
    """Whether no value can match two of ``options`` (so a union already means "exactly one"):
    one ``const`` each on a shared required property (a discriminated union), or distinct types
    no value has twice (``integer`` and ``number`` overlap)."""
    if not isinstance(options, list):
        return False
    resolved = [_resolved(option, defs) for option in options]
    if not all(isinstance(option, Mapping) for option in resolved):
        return False
    kinds = [option.get("type") for option in resolved]
    if all(isinstance(kind, str) for kind in kinds) and len(set(kinds)) == len(kinds):
        return not {"integer", "number"} <= set(kinds)
    shared = set.intersection(*(set(o.get("required") or ()) for o in resolved))
    for name in sorted(shared):
        tags = [(o.get("properties") or {}).get(name) for o in resolved]
        if all(isinstance(t, Mapping) and "const" in t for t in tags):
            values = [json.dumps(t["const"], sort_keys=True) for t in tags]  # type: ignore[index]
            if len(set(values)) == len(values):
                return True
    return False


def _resolved(schema: Any, defs: Mapping[str, Any]) -> Any:
    for _ in range(10):  # a chain of references, bounded
        if not isinstance(schema, Mapping) or "$ref" not in schema:
            return schema
        schema = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1])
    return None


def _described(error: Any) -> str:
    where = "".join(f"/{part}" for part in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:199] + "…"
    return f"{message} (at {where})" if where else message
