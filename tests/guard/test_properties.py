"""Property tests: whatever the model sends, the guard answers with a result and changes nothing it should not."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guard import Effect, Guard, Policy, Principal, Risk, RolePolicy, ToolContext, ToolResult, tool
from guard.shop import build_shop, shop_policy
from guard.testing import ManualClock

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
refund_like = st.fixed_dictionaries(
    {},
    optional={
        "order_id": st.sampled_from(["ORD-1001", "ORD-1002", "ORD-9999", "1001", ""])
        | st.text(max_size=10),
        "amount_cents": st.integers(-10, 20_000)
        | st.floats()
        | st.text(max_size=6)
        | st.booleans(),
        "currency": st.sampled_from(["BRL", "USD", "EUR", "brl"]),
        "reason": st.sampled_from(["damaged", "not_delivered", "customer_request", "other"]),
        "force": st.booleans(),
    },
)
TOOLS = ["get_order", "get_refund_status", "search_refund_policy", "refund_order", "nope"]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lenient_shop() -> Any:
    policy = shop_policy(
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_invalid_in_a_row=10**9,
        max_identical_calls=10**9,
    )
    shop = build_shop(clock=ManualClock(), policy=policy)
    session = shop.session("s1", "CUS-1")
    session.execute("get_order", '{"order_id": "ORD-1001"}')
    return shop, session


class TestNeverRaises:
    @SETTINGS
    @given(tool_name=st.sampled_from(TOOLS), value=json_values)
    def test_arbitrary_json_values(self, tool_name: str, value: Any) -> None:
        """Any JSON value as arguments gives a ToolResult and no refund without approval."""
        shop, session = lenient_shop()
        result = session.execute(tool_name, json.dumps(value))
        assert isinstance(result, ToolResult)
        assert shop.backend.side_effects == 0

    @SETTINGS
    @given(tool_name=st.sampled_from(TOOLS), text=st.text(max_size=200))
    def test_arbitrary_text(self, tool_name: str, text: str) -> None:
        """Any text as arguments gives a ToolResult and no refund without approval."""
        shop, session = lenient_shop()
        result = session.execute(tool_name, text)
        assert isinstance(result, ToolResult)
        assert result.ok or result.code != "OK"
        assert shop.backend.side_effects == 0

    @SETTINGS
    @given(arguments=refund_like, approve=st.booleans())
    def test_refunds_happen_only_when_valid_authorised_and_confirmed(
        self, arguments: dict[str, Any], approve: bool
    ) -> None:
        """A refund is applied only for valid arguments of the customer's own order, approved by a human."""
        shop, session = lenient_shop()
        result = session.execute("refund_order", json.dumps(arguments))
        if result.approval_id is not None:
            result = (shop.guard.approve if approve else shop.guard.deny)(
                result.approval_id, by="h"
            )
        valid = (
            arguments.get("order_id") == "ORD-1001"
            and arguments.get("currency") == "BRL"
            and type(arguments.get("amount_cents")) is int
            and 0 < arguments["amount_cents"] <= 10_000
            and arguments.get("reason") in {"damaged", "not_delivered", "customer_request"}
            and set(arguments) == {"order_id", "amount_cents", "currency", "reason"}
        )
        assert shop.backend.side_effects == int(valid and approve)
        assert result.ok == (valid and approve)


class Ticket(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(min_length=1, max_length=50)
    priority: int = Field(ge=1, le=5)


class TestUnconfirmedWrites:
    @SETTINGS
    @given(
        value=json_values
        | st.fixed_dictionaries({"title": st.text(max_size=60), "priority": st.integers(-2, 8)})
    )
    def test_a_write_without_confirmation_runs_iff_valid(self, value: Any) -> None:
        """For a low-risk write, the side effect happens exactly when the arguments validate."""
        effects: list[str] = []

        @tool(arguments=Ticket, effect=Effect.WRITE, risk=Risk.LOW)
        def open_ticket(args: Ticket, ctx: ToolContext) -> dict[str, str]:
            """Open a ticket."""
            effects.append(args.title)
            return {"opened": args.title}

        policy = Policy(roles={"u": RolePolicy(tools=frozenset({"open_ticket"}))}, rate_limit=None)
        guard = Guard(tools=[open_ticket], policy=policy, clock=ManualClock())
        result = guard.session("s", Principal(id="U", role="u")).execute(
            "open_ticket", json.dumps(value)
        )
        try:
            Ticket.model_validate(value, strict=True)
            valid = True
        except ValidationError:
            valid = False
        assert len(effects) == int(valid) == int(result.ok)
