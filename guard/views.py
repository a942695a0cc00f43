"""What the model may see of a handler's output, filtered through the result model as plain dicts.

The straightforward filter validates the output into result-model instances and dumps them back
to JSON-ready dicts: two passes, and one Python object per nested model. For a multi-kilobyte
record (a profile with its orders) that is most of what a call costs. The same schema with every
``model`` node turned into a ``typed-dict`` node validates straight into dicts, with the same
field schemas (types, constraints, defaults, field validators, aliases, ``extra`` handling), and
when every leaf is already a JSON type (a dict with string keys included) the dump pass is not
needed at all.

The rewrite is refused, and the model path kept, for anything whose meaning depends on having a
model instance: model validators, custom ``__init__`` or ``model_post_init``, root models,
computed fields, model or field serializers that take the instance, ``from_attributes``. Tests check the two paths
agree on accepted and refused outputs.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaSerializer, SchemaValidator

__all__ = ["ResultView"]

_JSON_LEAVES = frozenset(
    {"str", "int", "float", "bool", "none", "list", "nullable", "default", "typed-dict"}
)
"""Schema types whose validated values are already what a JSON-mode dump returns."""

_MODEL_BOUND = frozenset({"function-before", "function-after", "function-wrap", "function-plain"})


class _Refused(Exception):
    """The schema needs model instances: keep the model path."""


class ResultView:
    """``view(output)``: the result model's fields of ``output`` as JSON-ready dicts.

    Raises pydantic's ``ValidationError`` when the output does not fit the model, as the model
    path does."""

    __slots__ = ("_dump", "_fast", "_model_serializer", "_model_validator", "_validator")

    def __init__(self, model: type[BaseModel]) -> None:
        self._model_validator = model.__pydantic_validator__
        self._model_serializer = model.__pydantic_serializer__
        self._fast = False
        self._dump: SchemaSerializer | None = None
        try:
            schema = _as_dicts(model.__pydantic_core_schema__)
        except _Refused:
            return
        self._validator = SchemaValidator(schema)
        self._dump = None if _json_ready(schema) else SchemaSerializer(schema)
        self._fast = True

    @property
    def fast(self) -> bool:
        """The output is validated straight into dicts (the model path is not used)."""
        return self._fast

    @property
    def one_pass(self) -> bool:
        """The validated dicts are already what a JSON-mode dump returns: no dump pass runs."""
        return self._fast and self._dump is None

    def __call__(self, output: Any) -> dict[str, Any]:
        if not self._fast:
            view = self._model_validator.validate_python(output)
            data: dict[str, Any] = self._model_serializer.to_python(view, mode="json")
            return data
        value: dict[str, Any] = self._validator.validate_python(output)
        if self._dump is not None:
            value = self._dump.to_python(value, mode="json")
        return value


def _as_dicts(node: Any) -> Any:
    """A copy of a core schema with every model node as a typed-dict node; ``_Refused`` if the
    schema relies on model instances."""
    if isinstance(node, list):
        return [_as_dicts(item) for item in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    inner = node.get("schema")
    if kind in _MODEL_BOUND and isinstance(inner, dict) and inner.get("type") == "model":
        raise _Refused("a model validator")
    serialization = node.get("serialization")
    if isinstance(serialization, dict) and (
        serialization.get("is_field_serializer") or kind == "model"
    ):
        raise _Refused("a serializer that takes the model")
    if kind == "model":
        return _typed_dict(node)
    if kind in ("model-fields", "model-field"):
        raise _Refused("model fields outside a model")  # pragma: no cover (pydantic never does)
    return {key: _as_dicts(value) for key, value in node.items()}


def _typed_dict(model: dict[str, Any]) -> dict[str, Any]:
    if model.get("custom_init") or model.get("root_model") or model.get("post_init"):
        raise _Refused("custom init, post-init or a root model")
    if (model.get("config") or {}).get("from_attributes"):
        raise _Refused("from_attributes reads objects, which a typed dict does not")
    inner = model["schema"]
    if inner.get("type") != "model-fields" or inner.get("computed_fields"):
        raise _Refused("computed fields or wrapped fields")
    config = dict(model.get("config") or {})
    fields = {
        name: {
            **{k: _as_dicts(v) for k, v in field.items() if k not in ("type", "frozen")},
            "type": "typed-dict-field",
            "required": field["schema"].get("type") != "default",
        }
        for name, field in inner["fields"].items()
    }
    typed: dict[str, Any] = {
        "type": "typed-dict",
        "fields": fields,
        "extra_behavior": inner.get("extra_behavior")
        or config.get("extra_fields_behavior", "ignore"),
        "config": config,
    }
    if "ref" in model:
        typed["ref"] = model["ref"]
    return typed


def _json_ready(node: Any) -> bool:
    """Every node is a JSON type and nothing renames or drops a field on the way out."""
    if isinstance(node, list):
        return all(_json_ready(item) for item in node)
    if not isinstance(node, dict):
        return True
    kind = node.get("type")
    if kind == "typed-dict":
        if node.get("extra_behavior") == "allow":
            return False  # extras are copied as given: they may be any Python object
        return all(_json_ready(field) for field in node["fields"].values())
    if kind == "typed-dict-field":
        if node.get("serialization_alias") or node.get("serialization_exclude"):
            return False
        return _json_ready(node["schema"])
    if kind == "dict":  # string keys only: a JSON-mode dump turns any other key into a string
        keys = node.get("keys_schema")
        if not isinstance(keys, dict) or keys.get("type") != "str" or "serialization" in node:
            return False
        return _json_ready(keys) and _json_ready(node.get("values_schema", {"type": "any"}))
    if kind not in _JSON_LEAVES or "serialization" in node:
        return False
    return all(_json_ready(node[key]) for key in ("schema", "items_schema") if key in node)
