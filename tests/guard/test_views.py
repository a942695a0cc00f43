"""Result views: what a handler's output shows the model, validated straight into dicts."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from examples.retail.models import ItemView, ProductView
from guard.shop.models import OrderView, PolicyResults, RefundStatus
from guard.views import ResultView


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Line(_View):
    sku: str = Field(min_length=1)
    quantity: int = Field(ge=0)
    price: float | None = None


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Rich(_View):
    id: str = Field(validation_alias="identifier")
    when: datetime | None = None
    color: Color = Color.RED
    kind: Literal["a", "b"] = "a"
    lines: list[Line] = []
    tags: dict[str, int] = {}
    hidden: str = Field(default="x", exclude=True)

    @field_validator("id")
    @classmethod
    def upper(cls, value: str) -> str:
        return value.upper()


class WithModelValidator(_View):
    a: int

    @model_validator(mode="after")
    def positive(self) -> WithModelValidator:
        if self.a < 0:
            raise ValueError("negative")
        return self


class WithComputed(_View):
    a: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return 2 * self.a


class WithSerializer(_View):
    a: int

    @field_serializer("a")
    def shown(self, value: int) -> str:
        return f"#{value}"


class Node(_View):
    name: str
    children: list[Node] = []


class FromObjects(BaseModel):
    model_config = ConfigDict(from_attributes=True, extra="ignore")
    a: int


class Mapped(_View):
    names: dict[str, str] = {}
    scores: dict[str, float | None] = {}
    by_number: dict[int, str] = {}
    anything: dict[str, Any] = {}


class Forbidding(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int


MODELS: list[type[BaseModel]] = [
    OrderView,
    RefundStatus,
    PolicyResults,
    Line,
    Rich,
    WithModelValidator,
    WithComputed,
    WithSerializer,
    Forbidding,
    Node,
    FromObjects,
    Mapped,
    ItemView,
    ProductView,
]


VIEWS: dict[type[BaseModel], ResultView] = {}


def model_path(model: type[BaseModel], output: Any) -> dict[str, Any]:
    """The reference: validate into model instances, dump in JSON mode."""
    view = model.__pydantic_validator__.validate_python(output)
    data: dict[str, Any] = model.__pydantic_serializer__.to_python(view, mode="json")
    return data


def outcome(run: Any, output: Any) -> Any:
    try:
        return ("ok", run(output))
    except ValidationError as error:  # where it failed; the error type may say dict for model
        return ("error", [e["loc"] for e in error.errors()])


values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)
line = st.fixed_dictionaries(
    {
        "sku": st.text(max_size=3) | st.integers(),
        "quantity": st.integers(-2, 3) | st.text(max_size=2),
    },
    optional={"price": st.floats() | st.none() | st.text(max_size=2), "extra": values},
)
outputs = st.fixed_dictionaries(
    {},
    optional={
        "identifier": st.text(max_size=4) | st.integers(),
        "id": st.text(max_size=4),
        "when": st.sampled_from(["2026-01-01T00:00:00Z", "nope", datetime(2026, 1, 1, tzinfo=UTC)]),
        "color": st.sampled_from(["red", "blue", "green", Color.BLUE]),
        "kind": st.sampled_from(["a", "b", "c"]),
        "lines": st.lists(line, max_size=3) | values,
        "tags": st.dictionaries(
            st.text(max_size=3), st.integers() | st.text(max_size=2), max_size=2
        ),
        "hidden": st.text(max_size=3),
        "a": st.integers(-3, 3) | st.text(max_size=2),
        "order_id": st.text(max_size=4),
        "status": st.text(max_size=4),
        "amount_cents": st.integers() | st.floats(allow_nan=False),
        "currency": st.text(max_size=3),
        "refunded_cents": st.integers(),
        "refundable_cents": st.integers(),
        "as_of": st.text(max_size=4),
        "refunds": st.lists(values, max_size=2),
        "results": st.lists(
            st.fixed_dictionaries({"title": st.text(max_size=3), "text": st.text(max_size=3)}),
            max_size=2,
        ),
        "sku": st.text(max_size=3),
        "quantity": st.integers(-1, 2),
        "junk": values,
        "names": st.dictionaries(
            st.text(max_size=3), st.text(max_size=2) | st.integers(), max_size=2
        ),
        "scores": st.dictionaries(
            st.text(max_size=2), st.floats() | st.none() | st.text(max_size=2)
        ),
        "by_number": st.dictionaries(st.integers(-2, 2) | st.text(max_size=2), st.text(max_size=2)),
        "anything": st.dictionaries(st.text(max_size=2), values, max_size=2),
        "item_id": st.text(max_size=3),
        "product_id": st.text(max_size=3),
        "name": st.text(max_size=3),
        "options": st.dictionaries(st.text(max_size=3), st.text(max_size=3) | st.integers())
        | values,
        "price_cents": st.integers() | st.text(max_size=2),
        "variants": st.lists(
            st.fixed_dictionaries(
                {
                    "item_id": st.text(max_size=3),
                    "options": st.dictionaries(st.text(max_size=2), st.text(max_size=2)),
                    "price_cents": st.integers(),
                    "available": st.booleans() | st.text(max_size=2),
                }
            ),
            max_size=2,
        )
        | values,
    },
)


class TestResultView:
    @pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(output=outputs)
    def test_the_view_agrees_with_the_model_path(self, model: type[BaseModel], output: Any) -> None:
        """Whatever the handler returns, the view accepts and refuses exactly what the model path
        does, and shows the same data."""
        view = VIEWS.get(model) or VIEWS.setdefault(model, ResultView(model))
        assert outcome(view, output) == outcome(lambda o: model_path(model, o), output)

    @pytest.mark.parametrize(
        ("model", "one_pass"),
        [(ProductView, True), (ItemView, True), (OrderView, True), (Mapped, False), (Rich, False)],
    )
    def test_string_keyed_dicts_of_json_values_need_no_dump_pass(
        self, model: type[BaseModel], one_pass: bool
    ) -> None:
        """A dict with string keys and JSON values validates into its JSON form; int keys, Any
        values, enums and datetimes still go through the dump."""
        assert ResultView(model).one_pass is one_pass

    @pytest.mark.parametrize(
        ("model", "fast"),
        [
            (OrderView, True),
            (RefundStatus, True),
            (Rich, True),
            (WithModelValidator, False),
            (WithComputed, False),
            (WithSerializer, False),
            (Node, True),
            (FromObjects, False),
        ],
    )
    def test_models_that_need_instances_keep_the_model_path(
        self, model: type[BaseModel], fast: bool
    ) -> None:
        """Model validators, computed fields and serializers of the instance are not rewritten."""
        assert ResultView(model).fast is fast

    def test_recursive_models_are_filtered_at_every_level(self) -> None:
        """A tree of self-referencing models drops undeclared fields all the way down."""
        output = {
            "name": "a",
            "x": 1,
            "children": [{"name": "b", "children": [{"name": "c", "y": 2}]}],
        }
        assert ResultView(Node)(output) == model_path(Node, output)
        assert ResultView(Node)(output)["children"][0]["children"][0] == {
            "name": "c",
            "children": [],
        }

    def test_objects_are_read_by_attribute_where_the_model_says_so(self) -> None:
        """from_attributes keeps the model path, so a handler may still return an object."""

        class Row:
            a = 3
            secret = "s"

        assert ResultView(FromObjects)(Row()) == {"a": 3}

    def test_the_view_is_a_copy(self) -> None:
        """Changing the handler's record afterwards does not change what the model was shown."""
        record = {
            "order_id": "o",
            "sku": "s",
            "lines": [{"sku": "a", "quantity": 1}],
            "identifier": "i",
        }
        shown = ResultView(Rich)(record)
        record["lines"][0]["quantity"] = 99  # type: ignore[index]
        assert shown["lines"][0]["quantity"] == 1

    def test_undeclared_fields_never_reach_the_model(self) -> None:
        """Fields the result model does not declare are dropped, at every level."""
        shown = ResultView(Rich)(
            {"identifier": "i", "secret": "s", "lines": [{"sku": "a", "quantity": 1, "cost": 3}]}
        )
        assert "secret" not in shown and "cost" not in shown["lines"][0] and "hidden" not in shown
