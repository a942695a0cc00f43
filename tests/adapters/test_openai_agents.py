"""The OpenAI Agents SDK adapter, on the SDK's own ScriptedModel: no network, the real Runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from agents import (
    Agent,
    RunContextWrapper,
    Runner,
    ToolCallOutputItem,
    UserError,
    function_tool,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import Span, Trace, TracingProcessor, set_trace_processors
from agents.tracing.processors import default_processor

from callgate.adapters.openai_agents import GuardTools, tool_specs
from guard import Effect, Guard, Principal, Session
from guard.errors import ConfigurationError
from guard.policy import Policy, RolePolicy
from guard.shop import ShopApp, build_shop
from guard.testing import ManualClock, RecordingObserver
from telemetry import attributes as attr
from tests.adapters.conftest import REFUND, Traced

pytestmark = pytest.mark.anyio


class Collected(TracingProcessor):
    """Keeps the SDK's traces and spans in memory instead of exporting them to OpenAI."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        """Kept at start."""

    def on_span_start(self, span: Span[Any]) -> None:
        """Kept at end."""

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        """Nothing to release."""

    def force_flush(self) -> None:
        """Nothing buffered."""


@pytest.fixture(autouse=True)
def collected() -> Iterator[Collected]:
    processor = Collected()
    set_trace_processors([processor])
    yield processor
    set_trace_processors([default_processor()])


@dataclass
class Deps:
    """The run context the host passes: the conversation's guard session."""

    session: Session


def outputs(result: Any) -> dict[str, Any]:
    """The tool outputs the model read, by call id, decoded."""
    found = {}
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            raw = item.raw_item
            call_id = raw["call_id"] if isinstance(raw, dict) else raw.call_id
            found[call_id] = json.loads(item.output)
    return found


def refund_model() -> ScriptedModel:
    """Valid read, invalid amount then its correction, a refund awaiting approval, its duplicate."""
    return ScriptedModel(
        [
            [function_call("get_order", {"order_id": "ORD-1001"}, call_id="c1")],
            [function_call("refund_order", {**REFUND, "amount_cents": 50.0}, call_id="c2")],
            [function_call("refund_order", REFUND, call_id="c3")],
            # after the human approved c3:
            [function_call("refund_order", REFUND, call_id="c4")],
            [assistant_message("Your refund of 50.00 BRL is done.")],
        ]
    )


async def converse(shop: ShopApp, model: ScriptedModel) -> tuple[Any, Any, GuardTools]:
    gate = GuardTools(shop.guard)
    agent = Agent(name="support", model=model, tools=gate.tools())
    deps = Deps(session=shop.session("conv-1", "CUS-1"))
    first = await Runner.run(agent, "Refund 50 BRL of ORD-1001, it arrived damaged.", context=deps)
    (item,) = first.interruptions
    assert item.call_id == "c3"
    state = first.to_state()
    gate.approve(state, item, session=deps.session, by="agent-7")
    second = await Runner.run(agent, state, context=deps)
    return first, second, gate


class TestConversation:
    """A whole conversation through Runner.run with guard tools."""

    async def test_valid_recovery_confirmation_and_duplicate(self, shop: ShopApp) -> None:
        """The invalid amount is corrected, the refund interrupts, runs once on approval, replays."""
        first, second, _ = await converse(shop, refund_model())
        seen = outputs(first)
        assert seen["c1"]["code"] == "OK"
        assert seen["c2"]["code"] == "INVALID_ARGUMENTS"
        assert seen["c2"]["data"]["problems"][0]["path"] == "/amount_cents"
        assert "c3" not in seen  # interrupted for approval, not answered

        after = outputs(second)
        assert after["c3"]["ok"] is True and after["c3"]["code"] == "OK"
        assert after["c4"]["replayed"] is True
        assert second.final_output == "Your refund of 50.00 BRL is done."
        assert shop.backend.side_effects == 1

    async def test_approver_is_recorded(self, traced: Traced, traced_shop: ShopApp) -> None:
        """The host's approver reaches the guard, so the audit trail says who approved."""
        await converse(traced_shop, refund_model())
        approvers = [
            span.attributes.get(attr.APPROVER)
            for span in traced.callgate_calls()
            if span.attributes is not None and span.attributes.get(attr.APPROVER)
        ]
        assert approvers == [traced.telemetry.masker.principal("agent-7")]

    async def test_denial_reaches_the_model(self, shop: ShopApp) -> None:
        """A host's denial is recorded by the guard and the model reads CONFIRMATION_DENIED."""
        model = ScriptedModel(
            [
                [function_call("get_order", {"order_id": "ORD-1001"}, call_id="c1")],
                [function_call("refund_order", REFUND, call_id="c2")],
                [assistant_message("It was declined.")],
            ]
        )
        gate = GuardTools(shop.guard)
        agent = Agent(name="support", model=model, tools=gate.tools())
        deps = Deps(session=shop.session("conv-2", "CUS-1"))
        first = await Runner.run(agent, "Refund ORD-1001", context=deps)
        (item,) = first.interruptions
        pending = gate.pending(deps.session, item)
        assert pending is not None and json.loads(pending.arguments)["amount_cents"] == 5000
        state = first.to_state()
        gate.deny(state, item, session=deps.session, by="agent-7")
        second = await Runner.run(agent, state, context=deps)
        assert outputs(second)["c2"]["code"] == "CONFIRMATION_DENIED"
        assert str(shop.guard.pending(pending.id).state) == "denied"
        assert shop.backend.side_effects == 0

    async def test_rejection_before_confirmation_runs_the_pipeline_once(self) -> None:
        """A refund before get_order is answered PREREQUISITE_MISSING, no interruption, one step."""
        observer = RecordingObserver()
        shop = build_shop(observer=observer)
        model = ScriptedModel(
            [
                [function_call("refund_order", REFUND, call_id="c1")],
                [assistant_message("Let me look it up first.")],
            ]
        )
        gate = GuardTools(shop.guard)
        agent = Agent(name="support", model=model, tools=gate.tools())
        deps = Deps(session=shop.session("conv-3", "CUS-1"))
        result = await Runner.run(agent, "Refund ORD-1001", context=deps)
        assert not result.interruptions
        assert outputs(result)["c1"]["code"] == "PREREQUISITE_MISSING"
        assert [call.step for call, _ in observer.ended] == [1]

    async def test_approved_garbage_is_invalid_json(self, shop: ShopApp) -> None:
        """The SDK asks about unparsable arguments itself; approved, the guard says INVALID_JSON."""
        model = ScriptedModel(
            [
                [function_call("refund_order", "{not json", call_id="c1")],
                [assistant_message("Sorry.")],
            ]
        )
        gate = GuardTools(shop.guard)
        agent = Agent(name="support", model=model, tools=gate.tools())
        deps = Deps(session=shop.session("conv-g", "CUS-1"))
        first = await Runner.run(agent, "Refund", context=deps)
        (item,) = first.interruptions
        assert gate.pending(deps.session, item) is None  # nothing of callgate's is waiting
        state = first.to_state()
        state.approve(item)
        second = await Runner.run(agent, state, context=deps)
        assert outputs(second)["c1"]["code"] == "INVALID_JSON"
        assert shop.backend.side_effects == 0

    async def test_session_comes_from_the_context(self, shop: ShopApp) -> None:
        """A context without a session is a configuration error, not a global session."""
        model = ScriptedModel(
            [[function_call("get_order", {"order_id": "ORD-1001"}, call_id="c1")]]
        )
        agent = Agent(name="support", model=model, tools=GuardTools(shop.guard).tools())
        with pytest.raises(UserError, match=r"needs a guard\.Session"):  # the SDK wraps the error
            await Runner.run(agent, "hi", context=object())


class TestTracing:
    """callgate's call span joins the SDK's trace: the same trace id, the SDK span as parent."""

    async def test_call_spans_carry_the_agents_trace_id(
        self, traced: Traced, traced_shop: ShopApp, collected: Collected
    ) -> None:
        """Every call span's trace id is the SDK run's trace id; its parent is an SDK span."""
        await converse(traced_shop, refund_model())
        trace_ids = {trace.trace_id for trace in collected.traces}
        sdk_spans = {span.span_id.removeprefix("span_")[:16] for span in collected.spans}
        calls = traced.callgate_calls()
        assert len(calls) == 5  # c1, c2, c3 pending, c3 resumed, c4 replayed
        for span in calls:
            assert f"trace_{span.context.trace_id:032x}" in trace_ids
            assert span.parent is not None and f"{span.parent.span_id:016x}" in sdk_spans


class ShopDeps:
    """The wrapped tool's run context: the session and the vouchers it writes."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.vouchers: list[tuple[str, int]] = []


@function_tool
def send_voucher(ctx: RunContextWrapper[ShopDeps], customer_id: str, amount_cents: int) -> str:
    """Send a voucher.

    Args:
        customer_id: The customer id, e.g. CUS-1.
        amount_cents: Integer cents: 5.00 is 500.
    """
    ctx.context.vouchers.append((customer_id, amount_cents))
    return f"sent {amount_cents}"


class TestWrappedTools:
    """Existing @function_tool tools behind the guard."""

    async def test_function_tool_goes_through_the_pipeline(self) -> None:
        """Strict validation from the signature, the context reaches the tool, a write replays."""
        specs = tool_specs([send_voucher], options={"send_voucher": {"effect": Effect.WRITE}})
        guard = Guard(
            tools=specs,
            policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"send_voucher"}))}),
        )
        voucher = {"customer_id": "CUS-1", "amount_cents": 500}
        model = ScriptedModel(
            [
                [function_call("send_voucher", {**voucher, "amount_cents": "5.00"}, call_id="w1")],
                [function_call("send_voucher", voucher, call_id="w2")],
                [function_call("send_voucher", voucher, call_id="w3")],
                [assistant_message("Sent.")],
            ]
        )
        agent = Agent(name="ops", model=model, tools=GuardTools(guard).tools())
        deps = ShopDeps(guard.session("conv-w", Principal(id="ops-1", role="agent")))
        result = await Runner.run(agent, "Send CUS-1 a 5.00 voucher", context=deps)
        seen = outputs(result)
        problem = seen["w1"]["data"]["problems"][0]
        assert (
            problem["path"] == "/amount_cents" and problem["hint"] == "Integer cents: 5.00 is 500."
        )
        assert seen["w2"]["data"] == {"value": "sent 500"}
        assert seen["w3"]["replayed"] is True
        assert deps.vouchers == [("CUS-1", 500)]

    def test_hand_built_tool_is_refused(self) -> None:
        """A FunctionTool without a Python function cannot be validated, so it is refused."""
        (tool,) = GuardTools(
            Guard(tools=tool_specs([send_voucher]), policy=Policy(roles={}))
        ).tools()
        with pytest.raises(ConfigurationError):
            tool_specs([tool])


class TestLateDecisions:
    """A decision applies only to the action it was shown: late, it is CONFIRMATION_EXPIRED."""

    @pytest.mark.parametrize("when", ["approved-late", "resumed-late", "denied-late"])
    async def test_a_late_decision_expires(self, when: str) -> None:
        """Approved after the window, approved in time but resumed after it, or denied late: the
        model reads CONFIRMATION_EXPIRED, no fresh action is asked or run, nothing is refunded."""
        clock = ManualClock()
        shop = build_shop(clock=clock)
        model = ScriptedModel(
            [
                [function_call("get_order", {"order_id": "ORD-1001"}, call_id="c1")],
                [function_call("refund_order", REFUND, call_id="c2")],
                [assistant_message("It was not done.")],
            ]
        )
        gate = GuardTools(shop.guard)
        agent = Agent(name="support", model=model, tools=gate.tools())
        deps = Deps(session=shop.session("conv-late", "CUS-1"))
        first = await Runner.run(agent, "Refund ORD-1001", context=deps)
        (item,) = first.interruptions
        shown = gate.pending(deps.session, item)
        assert shown is not None
        question = gate.question(deps.session, item)
        assert question is not None and question.startswith("Approve refund_order for CUS-1?")
        state = first.to_state()
        ttl = shop.guard.policy.confirmation_ttl + 1
        if when != "resumed-late":
            clock.advance(ttl)
        if when == "denied-late":
            gate.deny(state, item, session=deps.session, by="agent-7")
        else:
            gate.approve(state, item, session=deps.session, by="agent-7")
        if when == "resumed-late":
            clock.advance(ttl)
        second = await Runner.run(agent, state, context=deps)
        assert outputs(second)["c2"]["code"] == "CONFIRMATION_EXPIRED"
        store = shop.guard.env.approvals
        assert [str(a.state) for i in store.ids() if (a := store.get(i))] == ["expired"]
        assert shop.backend.side_effects == 0
