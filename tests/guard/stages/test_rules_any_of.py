"""Stage 5: SeenIn over several result paths, and AnyOf (either-or across requirements)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import (
    AnyOf,
    Code,
    ConfigurationError,
    Effect,
    Guard,
    Policy,
    Prerequisite,
    Principal,
    RolePolicy,
    SeenIn,
    ToolContext,
    tool,
)


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Pay(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method_id: str


def build() -> tuple[Guard, list[str]]:
    paid: list[str] = []

    @tool(arguments=NoArgs)
    def get_profile(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
        """The profile: saved cards and gift cards."""
        return {"cards": [{"id": "card_1"}], "gift_cards": [{"id": "gift_9"}]}

    @tool(arguments=NoArgs, effect=Effect.WRITE)
    def add_method(args: NoArgs, ctx: ToolContext) -> dict[str, Any]:
        """Add a payment method."""
        return {"id": "new_1"}

    need = AnyOf(
        options=(
            SeenIn(field="method_id", tool="get_profile", path=("cards.*.id", "gift_cards.*.id")),
            Prerequisite(tool="add_method"),
        )
    )

    @tool(arguments=Pay, effect=Effect.WRITE, requires=(need,))
    def pay(args: Pay, ctx: ToolContext) -> dict[str, Any]:
        """Pay with a method."""
        paid.append(args.method_id)
        return {"ok": True}

    tools = [get_profile, add_method, pay]
    policy = Policy(
        roles={"u": RolePolicy(tools=frozenset(t.name for t in tools))}, rate_limit=None
    )
    return Guard(tools=tools, policy=policy), paid


USER = Principal(id="U", role="u")


def _pay(session: Any, method: str) -> Any:
    return session.execute("pay", json.dumps({"method_id": method}))


class TestAnyOf:
    def test_none_holds_tells_every_way(self) -> None:
        """Nothing read, nothing added: PREREQUISITE_MISSING naming both ways, nothing paid."""
        guard, paid = build()
        result = _pay(guard.session("s", USER), "card_1")
        assert result.code == Code.PREREQUISITE_MISSING
        assert "Or:" in result.message
        assert set(result.data["call_first"]) == {"get_profile", "add_method"}
        assert result.data["problems"][0]["path"] == "/method_id"
        assert paid == []

    @pytest.mark.parametrize("method", ["card_1", "gift_9"])
    def test_a_value_from_any_of_several_paths(self, method: str) -> None:
        """A card or a gift card the profile listed is seen."""
        guard, paid = build()
        session = guard.session("s", USER)
        assert session.execute("get_profile", "{}").ok
        assert _pay(session, method).ok
        assert paid == [method]

    def test_the_other_option_holds(self) -> None:
        """An unseen method passes once add_method ran (the either-or's second way)."""
        guard, paid = build()
        session = guard.session("s", USER)
        assert session.execute("add_method", "{}").ok
        assert _pay(session, "whatever").ok
        assert paid == ["whatever"]

    def test_unknown_tool_inside_any_of_is_refused(self) -> None:
        """An option naming an unknown tool is a configuration error at build time."""

        @tool(arguments=Pay, requires=(AnyOf(options=(Prerequisite(tool="nope"),)),))
        def t(args: Pay, ctx: ToolContext) -> None:
            """T."""

        with pytest.raises(ConfigurationError, match="nope"):
            Guard(tools=[t], policy=Policy(roles={}))

    def test_empty_any_of_is_refused(self) -> None:
        """AnyOf with no option is a configuration error."""
        with pytest.raises(ConfigurationError, match="AnyOf"):
            tool(arguments=Pay, requires=(AnyOf(options=()),), description="x")(lambda a, c: None)
