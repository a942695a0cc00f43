"""The LangGraph/LangChain adapter: a real StateGraph with ToolNode, a fake tool-calling chat model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from callgate.adapters.langgraph import decision, guard_tools, tool_specs
from guard import Effect, Guard, Principal, Session
from guard.errors import ConfigurationError
from guard.policy import Policy, RolePolicy
from guard.shop import ShopApp, build_shop
from guard.testing import ManualClock
from tests.adapters.conftest import REFUND, Traced


@dataclass
class Deps:
    """LangGraph's runtime context for the run: the conversation's guard session."""

    session: Session


def asks(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def build_graph(tools: list[Any], replies: list[AIMessage]) -> Any:
    """An agent node on a fake chat model, a ToolNode, and a checkpointer for interrupts."""
    model = GenericFakeChatModel(messages=iter(replies))

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState, context_schema=Deps)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def tool_messages(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def refund_replies() -> list[AIMessage]:
    """Valid read, invalid amount then its correction, a refund awaiting approval, its duplicate."""
    return [
        asks("get_order", {"order_id": "ORD-1001"}, "c1"),
        asks("refund_order", {**REFUND, "amount_cents": "5000"}, "c2"),
        asks("refund_order", REFUND, "c3"),
        asks("refund_order", REFUND, "c4"),
        AIMessage(content="Your refund of 50.00 BRL is done."),
    ]


def converse(shop: ShopApp, *, approve: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    graph = build_graph(guard_tools(shop.guard), refund_replies())
    config: RunnableConfig = {"configurable": {"thread_id": "conv-1"}}
    deps = Deps(session=shop.session("conv-1", "CUS-1"))
    first = graph.invoke(
        {"messages": [("user", "Refund 50 BRL of ORD-1001")]}, config, context=deps
    )
    second = graph.invoke(Command(resume=decision(approve, by="agent-7")), config, context=deps)
    return first, second


class TestConversation:
    """A whole conversation through a compiled StateGraph with guard tools in a ToolNode."""

    def test_valid_recovery_confirmation_and_duplicate(self, shop: ShopApp) -> None:
        """The string amount is an error message, the refund interrupts, runs once, replays."""
        first, second = converse(shop)
        seen = tool_messages(first)
        assert json.loads(seen["c1"].content)["code"] == "OK"
        assert seen["c2"].status == "error"
        problem = json.loads(seen["c2"].content)["data"]["problems"][0]
        assert problem["path"] == "/amount_cents" and problem["rule"] == "int_type"

        (pending,) = first["__interrupt__"]
        assert pending.value["tool"] == "refund_order"
        assert json.loads(pending.value["arguments"])["amount_cents"] == 5000

        after = tool_messages(second)
        assert json.loads(after["c3"].content)["ok"] is True
        assert json.loads(after["c4"].content)["replayed"] is True
        assert second["messages"][-1].content == "Your refund of 50.00 BRL is done."
        assert shop.backend.side_effects == 1

    def test_resumption_does_not_propose_twice(self) -> None:
        """The re-run of the tool node goes to the decision: one CONFIRMATION_REQUIRED in all."""
        from guard.shop import build_shop
        from guard.testing import RecordingObserver

        observer = RecordingObserver()
        converse(build_shop(observer=observer))
        codes = [str(result.code) for _, result in observer.ended]
        assert codes.count("CONFIRMATION_REQUIRED") == 1
        assert codes == ["OK", "INVALID_ARGUMENTS", "CONFIRMATION_REQUIRED", "OK", "OK"]

    def test_denial_reaches_the_model(self, shop: ShopApp) -> None:
        """A declined interrupt is CONFIRMATION_DENIED in the guard and an error for the model."""
        first, second = converse(shop, approve=False)
        denied = tool_messages(second)["c3"]
        assert denied.status == "error"
        assert json.loads(denied.content)["code"] == "CONFIRMATION_DENIED"
        approval_id = first["__interrupt__"][0].value["approval_id"]
        assert str(shop.guard.pending(approval_id).state) == "denied"
        assert shop.backend.side_effects == 0

    def test_plain_langchain_session_and_pending_result(self, shop: ShopApp) -> None:
        """Outside a graph: the session from configurable, the pending result instead of interrupt."""
        get_order, *_, refund_order = guard_tools(shop.guard, interrupts=False)
        config: RunnableConfig = {"configurable": {"session": shop.session("lc", "CUS-1")}}
        call = {"type": "tool_call", "id": "x1", "name": "get_order"}
        read = get_order.invoke({**call, "args": {"order_id": "ORD-1001"}}, config)
        assert json.loads(read.content)["code"] == "OK"
        write = refund_order.invoke(
            {**call, "id": "x2", "name": "refund_order", "args": REFUND}, config
        )
        payload = json.loads(write.content)
        assert payload["code"] == "CONFIRMATION_REQUIRED" and payload["approval_id"]
        with pytest.raises(ConfigurationError):
            get_order.invoke({**call, "args": {"order_id": "ORD-1001"}})


class TestTracing:
    """With OpenInference's LangChain instrumentation, callgate's span nests under the tool's."""

    @pytest.fixture
    def instrumented(self, traced: Traced) -> Iterator[Traced]:
        from openinference.instrumentation.langchain import LangChainInstrumentor

        instrumentor = LangChainInstrumentor()
        instrumentor.instrument(tracer_provider=traced.provider)
        yield traced
        instrumentor.uninstrument()

    def test_call_span_is_a_child_of_the_tool_span(
        self, instrumented: Traced, traced_shop: ShopApp
    ) -> None:
        """Each callgate call span's parent is the LangChain tool run's span of that tool."""
        converse(traced_shop)
        spans = instrumented.spans()
        by_id = {span.context.span_id: span for span in spans}
        calls = instrumented.callgate_calls()
        assert len(calls) == 5
        for span in calls:
            assert span.parent is not None
            parent = by_id[span.parent.span_id]
            assert parent.name == span.name.removeprefix("execute_tool ")
            assert parent.attributes is not None
            assert parent.attributes["openinference.span.kind"] == "TOOL"


@tool(parse_docstring=True)
def send_voucher(customer_id: str, amount_cents: int) -> str:
    """Send a voucher.

    Args:
        customer_id: The customer id, e.g. CUS-1.
        amount_cents: Integer cents: 5.00 is 500.
    """
    SENT.append((customer_id, amount_cents))
    return f"sent {amount_cents}"


SENT: list[tuple[str, int]] = []


class TestWrappedTools:
    """Existing LangChain tools behind the guard."""

    def test_langchain_tool_goes_through_the_pipeline(self) -> None:
        """Strict validation from the tool's schema (no "500" coercion), and a write replays."""
        SENT.clear()
        specs = tool_specs([send_voucher], options={"send_voucher": {"effect": Effect.WRITE}})
        guard = Guard(
            tools=specs,
            policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"send_voucher"}))}),
        )
        voucher = {"customer_id": "CUS-1", "amount_cents": 500}
        graph = build_graph(
            guard_tools(guard),
            [
                asks("send_voucher", {**voucher, "amount_cents": "500"}, "w1"),
                asks("send_voucher", voucher, "w2"),
                asks("send_voucher", voucher, "w3"),
                AIMessage(content="Sent."),
            ],
        )
        deps = Deps(session=guard.session("conv-w", Principal(id="ops-1", role="agent")))
        state = graph.invoke(
            {"messages": [("user", "voucher")]}, {"configurable": {"thread_id": "w"}}, context=deps
        )
        seen = {k: json.loads(m.content) for k, m in tool_messages(state).items()}
        problem = seen["w1"]["data"]["problems"][0]
        assert (
            problem["path"] == "/amount_cents" and problem["hint"] == "Integer cents: 5.00 is 500."
        )
        assert seen["w2"]["data"] == {"value": "sent 500"}
        assert seen["w3"]["replayed"] is True
        assert SENT == [("CUS-1", 500)]

    def test_a_json_schema_tool_is_refused(self) -> None:
        """A tool with a dict args_schema cannot be validated strictly, so it is refused."""
        (guard_tool,) = guard_tools(
            Guard(tools=tool_specs([send_voucher]), policy=Policy(roles={}))
        )
        with pytest.raises(ConfigurationError):
            tool_specs([guard_tool])


class TestAsync:
    """The same conversation through graph.ainvoke: the tool's async path."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.mark.anyio
    async def test_async_conversation(self, shop: ShopApp) -> None:
        """ainvoke: the refund interrupts, is approved, runs once, and the duplicate replays."""
        graph = build_graph(guard_tools(shop.guard), refund_replies())
        config: RunnableConfig = {"configurable": {"thread_id": "conv-a"}}
        deps = Deps(session=shop.session("conv-a", "CUS-1"))
        first = await graph.ainvoke({"messages": [("user", "Refund")]}, config, context=deps)
        assert first["__interrupt__"][0].value["tool"] == "refund_order"
        second = await graph.ainvoke(
            Command(resume=decision(True, by="agent-7")), config, context=deps
        )
        after = tool_messages(second)
        assert json.loads(after["c3"].content)["code"] == "OK"
        assert json.loads(after["c4"].content)["replayed"] is True
        assert shop.backend.side_effects == 1


def approvals_of(shop: ShopApp) -> dict[str, str]:
    """Every action the store holds, by id: its state."""
    store = shop.guard.env.approvals
    return {i: str(a.state) for i in store.ids() if (a := store.get(i)) is not None}


def late_graph(clock: ManualClock) -> tuple[ShopApp, Any, RunnableConfig, Deps, dict[str, Any]]:
    """A refund interrupted for approval, then the clock moved past the approval window."""
    shop = build_shop(clock=clock)
    graph = build_graph(guard_tools(shop.guard), refund_replies())
    config: RunnableConfig = {"configurable": {"thread_id": "conv-late"}}
    deps = Deps(session=shop.session("conv-late", "CUS-1"))
    first = graph.invoke({"messages": [("user", "Refund")]}, config, context=deps)
    clock.advance(shop.guard.policy.confirmation_ttl + 1)
    return shop, graph, config, deps, first


class TestLateDecisions:
    """A decision applies only to the action it was shown: late, it is CONFIRMATION_EXPIRED."""

    @pytest.mark.parametrize("approve", [True, False])
    @pytest.mark.parametrize("named", [True, False])
    def test_a_late_answer_expires_and_approves_nothing_new(
        self, approve: bool, named: bool
    ) -> None:
        """Resumed after the window, the call ends CONFIRMATION_EXPIRED and approves nothing: the
        model's next proposal (c4) is a new action, asked about in a new interrupt."""
        shop, graph, config, deps, first = late_graph(ManualClock())
        shown = first["__interrupt__"][0].value["approval_id"]
        answer = decision(approve, by="agent-7", approval_id=shown if named else None)
        second = graph.invoke(Command(resume=answer), config, context=deps)
        late = tool_messages(second)["c3"]
        assert late.status == "error"
        assert json.loads(late.content)["code"] == "CONFIRMATION_EXPIRED"
        (asked,) = second["__interrupt__"]
        assert asked.value["approval_id"] != shown
        assert approvals_of(shop) == {shown: "expired", asked.value["approval_id"]: "pending"}
        assert shop.backend.side_effects == 0

    @pytest.mark.anyio
    async def test_a_late_async_answer_expires(self) -> None:
        """ainvoke takes the same path: CONFIRMATION_EXPIRED, no side effect."""
        clock = ManualClock()
        shop = build_shop(clock=clock)
        graph = build_graph(guard_tools(shop.guard), refund_replies())
        config: RunnableConfig = {"configurable": {"thread_id": "conv-al"}}
        deps = Deps(session=shop.session("conv-al", "CUS-1"))
        await graph.ainvoke({"messages": [("user", "Refund")]}, config, context=deps)
        clock.advance(shop.guard.policy.confirmation_ttl + 1)
        second = await graph.ainvoke(
            Command(resume=decision(True, by="agent-7")), config, context=deps
        )
        assert json.loads(tool_messages(second)["c3"].content)["code"] == "CONFIRMATION_EXPIRED"
        assert shop.backend.side_effects == 0

    def test_an_answer_naming_another_action_is_refused(self) -> None:
        """A decision naming an approval id that is not this call's is a host error, not a run."""
        shop, graph, config, deps, _ = late_graph(ManualClock())
        other = shop.session("conv-other", "CUS-1")
        other.execute("get_order", {"order_id": "ORD-1001"})
        foreign = other.execute("refund_order", REFUND).approval_id
        assert foreign is not None
        answer = decision(True, by="agent-7", approval_id=foreign)
        with pytest.raises(ConfigurationError, match="not one of this call"):
            graph.invoke(Command(resume=answer), config, context=deps)
        assert shop.backend.side_effects == 0

    def test_the_interrupt_carries_the_escaped_question_and_facts(self, shop: ShopApp) -> None:
        """The payload has the question to show, whether the user was identified, the warnings."""
        first, _ = converse(shop)
        value = first["__interrupt__"][0].value
        assert value["authenticated"] is True and value["warnings"] == []
        assert value["question"].startswith("Approve refund_order for CUS-1?")
