"""The schemas the Python MCP SDK lists for ordinary type hints: accepted, and judged as jsonschema does."""

from __future__ import annotations

import inspect
import itertools
import json
from datetime import date
from typing import Annotated, Any, Literal, Union

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel, Field, ValidationError, create_model

from callgate.gateway import UnsupportedSchema, model_from_schema

_names = itertools.count()


def listed(hints: dict[str, Any]) -> dict[str, Any]:
    """The inputSchema a real SDK server lists for a tool whose parameters have ``hints``."""
    app = MCPServer("shapes")

    def shaped(**kwargs: Any) -> str:
        return "ok"

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter(n, keyword, annotation=h) for n, h in hints.items()]
    shaped.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    shaped.__annotations__ = {**hints, "return": str}
    app.tool(name="shaped")(shaped)

    async def tools() -> Any:
        return await app.list_tools()

    schema: dict[str, Any] = anyio.run(tools)[0].input_schema
    return schema


def model(hint: Any, fields: int) -> type[BaseModel]:
    built: type[BaseModel] = create_model(
        f"M{next(_names)}", **{f"f{i}": (hint, ...) for i in range(fields)}
    )
    return built


def tagged(hint: Any) -> Any:
    """A discriminated union of two models, the SDK's oneOf with a discriminator."""
    one = create_model(f"A{next(_names)}", kind=(Literal["a"], ...), x=(hint, ...))
    two = create_model(f"B{next(_names)}", kind=(Literal["b"], ...), y=(int | None, None))
    return Annotated[Union[one, two], Field(discriminator="kind")]  # noqa: UP007


LEAVES = st.sampled_from(
    [
        int,
        str,
        float,
        bool,
        Any,
        date,
        Literal["a", "b"],
        Literal[1, 2],
        Annotated[int, Field(ge=0, le=10)],
        Annotated[str, Field(max_length=3)],
        Annotated[float, Field(gt=0)],
    ]
)
HINTS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        inner.map(lambda h: list[h]),  # type: ignore[valid-type]
        inner.map(lambda h: dict[str, h]),  # type: ignore[valid-type]
        st.tuples(inner, inner).map(lambda p: tuple[p[0], p[1]]),  # type: ignore[valid-type]
        inner.map(lambda h: tuple[h, ...]),  # type: ignore[valid-type]
        inner.map(lambda h: h | None),
        st.tuples(inner, inner).map(lambda p: Union[p[0], p[1]]),  # noqa: UP007
        st.just(set[int]),
        st.tuples(inner, st.integers(1, 2)).map(lambda p: model(*p)),
        inner.map(tagged),
    ),
    max_leaves=4,
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 12)
    # 5.0 is an integer to JSON Schema and not to the guard (no coercion): left out of the comparison
    | st.integers(-4, 12).map(lambda i: i + 0.5)
    | st.sampled_from(["a", "b", "abcd", "", "2026-12-02", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abxy"), inner),
    max_leaves=6,
)


def near(schema: Any, defs: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """Values shaped like ``schema``, with random JSON anywhere: valid and invalid, side by side."""
    if not isinstance(schema, dict) or depth > 6:
        return JSON
    if "$ref" in schema:
        return near(defs[schema["$ref"].rsplit("/", 1)[1]], defs, depth + 1)
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        return st.one_of([near(o, defs, depth + 1) for o in options])
    if "enum" in schema or "const" in schema:
        return st.sampled_from([*schema.get("enum", [schema.get("const")]), 3, "c"])
    kind = schema.get("type")
    shaped: st.SearchStrategy[Any] = JSON
    if kind == "object" and "properties" in schema:
        properties, required = schema["properties"], set(schema.get("required", ()))
        shaped = st.fixed_dictionaries(
            {k: near(v, defs, depth + 1) for k, v in properties.items() if k in required},
            optional={
                **{k: near(v, defs, depth + 1) for k, v in properties.items() if k not in required},
                "zz": JSON,
            },
        )
    elif kind == "object":
        shaped = st.dictionaries(
            st.sampled_from("ab"), near(schema.get("additionalProperties", True), defs, depth + 1)
        )
    elif kind == "array" and "prefixItems" in schema:
        shaped = st.tuples(*[near(p, defs, depth + 1) for p in schema["prefixItems"]]).map(list)
    elif kind == "array":
        shaped = st.lists(near(schema.get("items", True), defs, depth + 1), max_size=3)
    return st.one_of(shaped, shaped, JSON) if depth else shaped


def closed(schema: Any) -> Any:
    """``schema`` with the guard's rule spelled out: declared properties close an object."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def accepts(built: type[BaseModel], data: Any) -> bool:
    """The guard's schema stage: strict on the object, then strict JSON (arrays are tuples)."""
    try:
        built.__pydantic_validator__.validate_python(data, strict=True)
        return True
    except ValidationError:
        pass
    try:
        built.__pydantic_validator__.validate_json(json.dumps(data), strict=True)
        return True
    except ValidationError:
        return False


class TestSdkShapes:
    """Every schema the SDK lists for ordinary hints is accepted, and judged like jsonschema."""

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(hints=st.lists(HINTS, min_size=1, max_size=3), data=st.data())
    def test_validation_agrees_with_jsonschema(self, hints: list[Any], data: st.DataObject) -> None:
        """Accepted by the translation exactly when jsonschema accepts (the closed schema)."""
        schema = listed({f"p{i}": h for i, h in enumerate(hints)})
        built = model_from_schema("shaped", schema)
        reference = Draft202012Validator(closed(schema))
        for _ in range(8):
            instance = data.draw(near(schema, schema.get("$defs", {})))
            assert accepts(built, instance) == reference.is_valid(instance), (schema, instance)

    @pytest.mark.parametrize(
        "hint",
        [dict, dict[str, Any], dict[str, int], Any, tuple[int, str], tuple[int, ...], set[str]],
    )
    def test_each_named_shape_is_accepted_strict_and_relaxed(self, hint: Any) -> None:
        """dict, Any, tuples and sets: no refusal under strict: true or strict: false."""
        schema = listed({"value": hint, "maybe": hint | None})
        assert model_from_schema("shaped", schema, strict=True)
        assert model_from_schema("shaped", schema, strict=False)

    def test_integers_sent_for_numbers_stay_integers(self) -> None:
        """A float parameter given 3 sends 3 upstream, not 3.0."""
        built = model_from_schema("shaped", listed({"n": float}))
        value = built.__pydantic_validator__.validate_python({"n": 3}, strict=True)
        assert json.loads(built.__pydantic_serializer__.to_json(value)) == {"n": 3}
        assert json.dumps(built.__pydantic_serializer__.to_python(value, mode="json")) == '{"n": 3}'


UNTYPED = [
    ({"not": {"type": "string"}}, "'not'"),
    ({"if": {"type": "string"}, "then": {"minLength": 2}}, "'if'"),
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}}, "'patternProperties'"),
    ({"allOf": [{"type": "string"}, {"minLength": 2}]}, "allOf of several"),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, "open length"),
]


class TestRelaxed:
    """strict: false takes what strict refuses by name, validated by jsonschema as the upstream declared."""

    @pytest.mark.parametrize(("sub", "named"), UNTYPED)
    def test_strict_refuses_by_name(self, sub: dict[str, Any], named: str) -> None:
        """Each keyword a typed model cannot hold is named in the refusal."""
        schema = {"type": "object", "properties": {"a": sub}, "required": ["a"]}
        with pytest.raises(UnsupportedSchema, match=named):
            model_from_schema("shaped", schema)

    @settings(max_examples=40, deadline=None)
    @given(index=st.integers(0, len(UNTYPED) - 1), value=JSON)
    def test_relaxed_validates_like_jsonschema(self, index: int, value: Any) -> None:
        """Under strict: false the same part accepts exactly the values jsonschema accepts."""
        schema = {"type": "object", "properties": {"a": UNTYPED[index][0]}, "required": ["a"]}
        built = model_from_schema("shaped", schema, strict=False)
        assert accepts(built, {"a": value}) == Draft202012Validator(schema).is_valid({"a": value})

    def test_a_remote_reference_is_refused_even_relaxed(self) -> None:
        """The gateway never fetches a schema: a $ref outside the document is refused by name."""
        schema = {"type": "object", "properties": {"a": {"$ref": "https://x.test/s.json"}}}
        with pytest.raises(UnsupportedSchema, match="only local"):
            model_from_schema("shaped", schema, strict=False)
