"""Stage 3 for lists, dicts, tuples and rules across fields: messages a model can act on."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, model_validator

from guard import Guard, Policy, Principal, RolePolicy, ToolContext, tool
from guard.providers import openai_chat_tools

RUNS: list[Any] = []


class Exchange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    item_ids: list[str] = Field(min_length=1, max_length=3, description="Items to exchange.")
    new_item_ids: list[str] = Field(min_length=1, max_length=3, description="Their replacements.")
    notes: dict[str, str] = Field(default_factory=dict, max_length=1)
    window: tuple[int, int] = (9, 17)
    on: datetime.date | None = None

    @model_validator(mode="after")
    def same_length(self) -> Exchange:
        """new_item_ids has one replacement for each of item_ids, in the same order."""
        if len(self.item_ids) != len(self.new_item_ids):
            raise ValueError("new_item_ids must have one entry for each of item_ids")
        return self


@tool(arguments=Exchange)
def exchange(args: Exchange, ctx: ToolContext) -> dict[str, Any]:
    """Exchange items."""
    RUNS.append(args)
    return {"exchanged": len(args.item_ids)}


def run(arguments: dict[str, Any]) -> Any:
    guard = Guard(
        tools=[exchange],
        policy=Policy(roles={"r": RolePolicy(tools=frozenset({"exchange"}))}, rate_limit=None),
    )
    return guard.session("s", Principal(id="u", role="r")).execute(
        "exchange", json.dumps(arguments)
    )


class TestContainerMessages:
    """Arrays and objects are counted in items and entries, never in characters."""

    def test_an_empty_list_says_it_must_not_be_empty(self) -> None:
        """An empty list is 'must not be empty', not 'at least 1 characters'."""
        result = run({"item_ids": [], "new_item_ids": ["b"]})
        (problem,) = result.data["problems"]
        assert problem["path"] == "/item_ids" and problem["rule"] == "too_short"
        assert problem["expected"] == "at least one of its items: it must not be empty"
        assert "characters" not in result.message and RUNS == []

    def test_long_lists_and_dicts_count_items_and_entries(self) -> None:
        """Too many items, too many entries."""
        result = run(
            {"item_ids": list("abcd"), "new_item_ids": list("abcd"), "notes": {"a": "1", "b": "2"}}
        )
        expected = {p["path"]: p["expected"] for p in result.data["problems"]}
        assert expected["/item_ids"] == "at most 3 items"
        assert expected["/notes"] == "at most 1 entries"

    def test_a_tuple_is_an_array_of_fixed_length(self) -> None:
        """JSON has no tuples: an array of the right length validates, a short one names the missing item."""
        assert run(
            {"item_ids": ["a"], "new_item_ids": ["b"], "window": [8, 12], "on": "2026-01-02"}
        ).ok
        assert RUNS.pop().window == (8, 12)
        (problem,) = run({"item_ids": ["a"], "new_item_ids": ["b"], "window": [8]}).data["problems"]
        assert problem["path"] == "/window/1" and "too short" in problem["expected"]


class TestCrossFieldMessages:
    """A model_validator's error reads as the rule, on the whole arguments, without echoing them."""

    def test_the_rule_is_the_message(self) -> None:
        """No 'Value error,' prefix, no '/' path, no arguments echoed back."""
        result = run({"item_ids": ["a", "b"], "new_item_ids": ["c"]})
        (problem,) = result.data["problems"]
        assert problem == {
            "path": "",
            "rule": "value_error",
            "expected": "new_item_ids must have one entry for each of item_ids",
            "got": "",
        }
        assert "Value error" not in result.message and '"a"' not in result.message
        assert (
            "the arguments: new_item_ids must have one entry for each of item_ids" in result.message
        )

    def test_the_rule_reaches_the_description(self) -> None:
        """The validator's docstring is in the description every provider renders."""
        (rendered,) = openai_chat_tools([exchange])
        description = rendered["function"]["description"]
        assert description.startswith("Exchange items.")
        assert (
            "- new_item_ids has one replacement for each of item_ids, in the same order."
            in description
        )

    @pytest.mark.parametrize(
        "bad",
        [
            {"item_ids": "a", "new_item_ids": ["b"]},
            {"item_ids": ["a"], "new_item_ids": ["b"], "notes": []},
        ],
    )
    def test_wrong_container_types_say_which(self, bad: dict[str, Any]) -> None:
        """A string for an array, an array for an object."""
        (problem,) = run(bad).data["problems"]
        assert problem["expected"] in ("an array", "an object")
