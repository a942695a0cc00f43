"""JSON Schema to strict pydantic models: the supported subset honoured, everything else refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from callgate.gateway import UnsupportedSchema, model_from_schema

REFUND = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^ORD-[0-9]+$"},
        "amount_cents": {"type": "integer", "minimum": 1, "maximum": 50000},
        "currency": {"enum": ["BRL", "USD"]},
        "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "maxItems": 2},
    },
    "required": ["order_id", "amount_cents"],
    "$defs": {
        "Line": {
            "type": "object",
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku"],
        }
    },
}


def validate(schema: dict[str, Any], data: Any, *, strict: bool = True) -> dict[str, Any]:
    model = model_from_schema("refund", schema, strict=strict)
    value = model.__pydantic_validator__.validate_python(data, strict=True)
    return dict(model.__pydantic_serializer__.to_python(value, mode="json"))


class TestSupported:
    """What the upstream declares is what the guard enforces, strictly."""

    def test_a_valid_call_passes_and_absent_optional_fields_stay_absent(self) -> None:
        """Omitted non-nullable fields are not sent as null; nested $ref objects validate."""
        data = validate(REFUND, {"order_id": "ORD-1", "amount_cents": 5, "lines": [{"sku": "A"}]})
        assert data == {
            "order_id": "ORD-1",
            "amount_cents": 5,
            "note": None,
            "lines": [{"sku": "A"}],
        }

    @pytest.mark.parametrize(
        "data",
        [
            {"order_id": "ORD-1", "amount_cents": "5"},
            {"order_id": "ORD-1", "amount_cents": 5.0},
            {"order_id": "ORD-1", "amount_cents": 0},
            {"order_id": "X-1", "amount_cents": 5},
            {"order_id": "ORD-1", "amount_cents": 5, "currency": "EUR"},
            {"order_id": "ORD-1", "amount_cents": 5, "note": "x" * 21},
            {"order_id": "ORD-1", "amount_cents": 5, "lines": [{"sku": "A", "price": 1}]},
            {"order_id": "ORD-1", "amount_cents": 5, "lines": [{"sku": "A"}] * 3},
            {"order_id": "ORD-1", "amount_cents": 5, "admin": True},
            {"amount_cents": 5},
        ],
    )
    def test_every_violation_is_refused(self, data: dict[str, Any]) -> None:
        """No coercion, bounds, patterns, enums, nested extras, array sizes, unknown and missing fields."""
        with pytest.raises(ValidationError):
            validate(REFUND, data)

    def test_a_relaxed_tool_coerces_and_drops_unknown_fields(self) -> None:
        """strict=False: "5" becomes 5 and an unknown field is dropped; bounds still hold."""
        assert validate(
            REFUND, {"order_id": "ORD-1", "amount_cents": "5", "x": 1}, strict=False
        ) == {
            "order_id": "ORD-1",
            "amount_cents": 5,
            "note": None,
        }
        with pytest.raises(ValidationError):
            validate(REFUND, {"order_id": "ORD-1", "amount_cents": "0"}, strict=False)

    def test_property_names_pydantic_cannot_hold_keep_their_name_on_the_wire(self) -> None:
        """A key like user-id, json or _private validates and is sent under its own name."""
        schema = {
            "type": "object",
            "properties": {
                "user-id": {"type": "integer"},
                "json": {"type": "string"},
                "_private": {"type": "boolean"},
            },
            "required": ["user-id", "json"],
        }
        sent = {"user-id": 7, "json": "x", "_private": True}
        assert validate(schema, sent) == sent
        with pytest.raises(ValidationError):
            validate(schema, {"user_id": 7, "json": "x"})

    @pytest.mark.parametrize(
        ("schema", "good", "bad"),
        [
            (
                {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 1},
                {"a": 1},
                {},
            ),
            (
                {
                    "type": "object",
                    "properties": {
                        "rows": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "tags": {"type": "array", "uniqueItems": True, "items": {}}
                                },
                            },
                        }
                    },
                },
                {"rows": [{"tags": [1, "1", True]}]},
                {"rows": [{"tags": [1, 1.0]}]},
            ),
            (
                {
                    "type": "object",
                    "properties": {"x": {"oneOf": [{"type": "integer"}, {"type": "number"}]}},
                },
                {"x": 1.5},
                {"x": 2},
            ),
        ],
    )
    def test_checked_keywords_hold_at_the_root_and_deep_inside(
        self, schema: dict[str, Any], good: dict[str, Any], bad: dict[str, Any]
    ) -> None:
        """minProperties at the root, uniqueItems in a list of objects, oneOf's exactly-one."""
        assert validate(schema, good)
        with pytest.raises(ValidationError):
            validate(schema, bad)


class TestRefused:
    """A keyword the translation does not understand refuses the tool, naming keyword and place."""

    @pytest.mark.parametrize(
        ("schema", "named"),
        [
            ({"type": "object", "properties": {"a": {"type": "string", "not": {}}}}, "'not' at /a"),
            ({"type": "object", "additionalProperties": True}, "additionalProperties"),
            (
                {
                    "type": "object",
                    "properties": {"a": {"$ref": "#/$defs/A"}},
                    "$defs": {"A": {"$ref": "#/$defs/A"}},
                },
                "recursive",
            ),
            ({"type": "object", "properties": {"a": {"type": "string", "minimum": 1}}}, "minimum"),
            ({"type": "object", "patternProperties": {}}, "'patternProperties'"),
            ({"type": "object", "properties": {"a": {"x-unknown": 1}}}, "'x-unknown' at /a"),
            ({"type": "array"}, "root"),
            ({"type": "object", "required": ["b"], "properties": {}}, "undeclared"),
        ],
    )
    def test_unsupported_schemas_are_refused_by_name(
        self, schema: dict[str, Any], named: str
    ) -> None:
        """The message says the tool and what is not supported."""
        with pytest.raises(UnsupportedSchema) as caught:
            model_from_schema("crm_tagged", schema)
        assert "crm_tagged" in str(caught.value) and named in str(caught.value)
