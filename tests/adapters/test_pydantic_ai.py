"""The Pydantic AI adapter, with Pydantic AI's FunctionModel: no network, the real agent loop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDefinition,
)
from pydantic_ai.toolsets import ExternalToolset, FunctionToolset

from callgate.adapters import current_tool_context
from callgate.adapters.pydantic_ai import APPROVAL_KEY, GuardToolset, decide, tool_specs
from guard import Effect, Guard, Principal, Session
from guard.errors import ConfigurationError
from guard.policy import Policy, RolePolicy
from guard.shop import ShopApp, build_shop, shop_policy
from guard.testing import ManualClock
from tests.adapters.conftest import REFUND, Traced

pytestmark = pytest.mark.anyio


@dataclass
class Deps:
    """What the host gives each run: the conversation's guard session."""

    session: Session


@dataclass
class Script:
    """A FunctionModel that answers with the given parts in turn, and keeps what it was sent."""

    steps: Iterator[ModelResponse]
    seen: list[list[ModelMessage]] = field(default_factory=list)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        return next(self.steps)


def call(name: str, args: dict[str, Any] | str, call_id: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])


def text(words: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(words)])


def parts(messages: list[ModelMessage], kind: type) -> list[Any]:
    return [part for message in messages for part in message.parts if isinstance(part, kind)]


def retried(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool results Pydantic AI sent back as "correct this and retry" (``ModelRetry``)."""
    return [p for p in parts(messages, ToolReturnPart) if p.outcome == "retried"] + parts(
        messages, RetryPromptPart
    )


def refund_conversation() -> Script:
    """Valid read, invalid amount then its correction, a refund awaiting approval, its duplicate."""
    return Script(
        iter(
            [
                call("get_order", {"order_id": "ORD-1001"}, "c1"),
                call("refund_order", {**REFUND, "amount_cents": "50.00"}, "c2"),
                call("refund_order", REFUND, "c3"),
                # the second run, after the human approved c3:
                call("refund_order", REFUND, "c4"),
                text("Your refund of 50.00 BRL is done."),
            ]
        )
    )


def make_agent(shop: ShopApp, script: Script, **kwargs: Any) -> Agent[Deps, Any]:
    return Agent(
        FunctionModel(script),
        deps_type=Deps,
        toolsets=[GuardToolset(shop.guard)],
        output_type=[str, DeferredToolRequests],
        **kwargs,
    )


async def converse(shop: ShopApp, script: Script, **kwargs: Any) -> tuple[Any, Any]:
    """Run the refund conversation: first run to the approval, the host approves, second run."""
    agent = make_agent(shop, script, **kwargs)
    deps = Deps(session=shop.session("conv-1", "CUS-1"))
    first = await agent.run("Refund 50 BRL of ORD-1001, it arrived damaged.", deps=deps)
    assert isinstance(first.output, DeferredToolRequests)
    results = decide(shop.guard, first.output, {"c3": True}, by="agent-7")
    second = await agent.run(
        message_history=first.all_messages(), deferred_tool_results=results, deps=deps
    )
    return first, second


class TestConversation:
    """A whole conversation through Agent.run with guard tools."""

    async def test_valid_recovery_confirmation_and_duplicate(self, shop: ShopApp) -> None:
        """The invalid amount is retried and corrected, the refund waits, runs once, and replays."""
        script = refund_conversation()
        first, second = await converse(shop, script)

        retry = retried(first.all_messages())
        assert len(retry) == 1 and retry[0].tool_name == "refund_order"
        payload = json.loads(retry[0].content)
        assert payload["code"] == "INVALID_ARGUMENTS"
        assert payload["data"]["problems"][0]["path"] == "/amount_cents"

        (pending,) = first.output.approvals
        assert pending.tool_call_id == "c3"
        metadata = first.output.metadata["c3"]
        assert metadata["code"] == "CONFIRMATION_REQUIRED"
        assert json.loads(metadata["arguments"])["amount_cents"] == 5000

        returns = {
            p.tool_call_id: p
            for p in parts(second.all_messages(), ToolReturnPart)
            if p.outcome == "success"
        }
        assert returns["c1"].content["code"] == "OK"
        assert returns["c3"].content["ok"] is True
        assert returns["c4"].content["replayed"] is True
        assert second.output == "Your refund of 50.00 BRL is done."
        assert shop.backend.side_effects == 1

    async def test_denied_refund_reaches_the_model(self, shop: ShopApp) -> None:
        """A host's denial is recorded by the guard and the model reads CONFIRMATION_DENIED."""
        script = Script(
            iter(
                [
                    call("get_order", {"order_id": "ORD-1001"}, "c1"),
                    call("refund_order", REFUND, "c2"),
                    text("It was declined."),
                ]
            )
        )
        agent = make_agent(shop, script)
        deps = Deps(session=shop.session("conv-2", "CUS-1"))
        first = await agent.run("Refund ORD-1001", deps=deps)
        approval_id = first.output.metadata["c2"][APPROVAL_KEY]
        results = decide(shop.guard, first.output, {"c2": False}, by="agent-7")
        second = await agent.run(
            message_history=first.all_messages(), deferred_tool_results=results, deps=deps
        )
        denied = [p for p in parts(second.all_messages(), ToolReturnPart) if p.tool_call_id == "c2"]
        assert json.loads(denied[0].content)["code"] == "CONFIRMATION_DENIED"
        assert str(shop.guard.pending(approval_id).state) == "denied"
        assert shop.backend.side_effects == 0

    async def test_plain_approval_and_changed_arguments(self, shop: ShopApp) -> None:
        """A plain True approval resumes the action; arguments changed on approval are refused."""
        for override, expected in ((None, 1), ({**REFUND, "amount_cents": 9000}, 0)):
            shop = build_shop()
            script = Script(
                iter(
                    [
                        call("get_order", {"order_id": "ORD-1001"}, "c1"),
                        call("refund_order", REFUND, "c2"),
                        text("Done."),
                    ]
                )
            )
            agent = make_agent(shop, script)
            deps = Deps(session=shop.session("conv-p", "CUS-1"))
            first = await agent.run("Refund ORD-1001", deps=deps)
            approval = ToolApproved(override_args=override) if override else True
            results = DeferredToolResults(approvals={"c2": approval})
            if override is None:
                await agent.run(
                    message_history=first.all_messages(), deferred_tool_results=results, deps=deps
                )
            else:
                with pytest.raises(ConfigurationError):
                    await agent.run(
                        message_history=first.all_messages(),
                        deferred_tool_results=results,
                        deps=deps,
                    )
            assert shop.backend.side_effects == expected

    async def test_tainted_session_defers_the_write(self, shop: ShopApp) -> None:
        """After untrusted policy text, the injected refund waits for a human as TAINTED_CONTEXT."""
        injected = {**REFUND, "order_id": "ORD-1003", "amount_cents": 2590}
        script = Script(
            iter(
                [
                    call("search_refund_policy", {"query": "partial refunds"}, "c1"),
                    call("get_order", {"order_id": "ORD-1003"}, "c2"),
                    call("refund_order", injected, "c3"),
                ]
            )
        )
        result = await make_agent(shop, script).run(
            "Can I get a partial refund?", deps=Deps(session=shop.session("t", "CUS-1"))
        )
        assert isinstance(result.output, DeferredToolRequests)
        assert result.output.metadata["c3"]["code"] == "TAINTED_CONTEXT"
        assert shop.backend.side_effects == 0

    async def test_not_fixable_rejection_is_a_failed_tool_result(self, shop: ShopApp) -> None:
        """A refund before get_order is fixable (retry); a viewer's refund fails without a retry."""
        script = Script(iter([call("refund_order", REFUND, "c1"), text("I cannot.")]))
        agent = make_agent(shop, script)
        result = await agent.run("Refund", deps=Deps(session=shop.session("v", "CUS-1", "viewer")))
        (failed,) = parts(result.all_messages(), ToolReturnPart)
        assert failed.outcome == "failed"
        assert json.loads(failed.content)["code"] == "TOOL_NOT_ALLOWED"
        assert not retried(result.all_messages())

    async def test_session_comes_from_deps(self, shop: ShopApp) -> None:
        """Deps without a session is a configuration error, not a silent global session."""
        agent = make_agent(shop, Script(iter([call("get_order", {"order_id": "ORD-1001"}, "c1")])))
        with pytest.raises(ConfigurationError):
            await agent.run("hi", deps=object())  # type: ignore[arg-type]


class TestTracing:
    """callgate's call span nests under Pydantic AI's own tool span."""

    async def test_call_span_is_a_child_of_execute_tool(
        self, traced: Traced, traced_shop: ShopApp
    ) -> None:
        """Every callgate call span has Pydantic AI's execute_tool span of that call as parent."""
        settings = InstrumentationSettings(tracer_provider=traced.provider)
        await converse(
            traced_shop, refund_conversation(), capabilities=[Instrumentation(settings=settings)]
        )
        spans = traced.spans()
        framework = {
            span.context.span_id: span
            for span in spans
            if span.instrumentation_scope is not None
            and span.instrumentation_scope.name == "pydantic-ai"
        }
        calls = traced.callgate_calls()
        assert len(calls) == 5  # c1, c2, c3 pending, c3 resumed, c4 replayed
        for span in calls:
            assert span.parent is not None
            parent = framework[span.parent.span_id]
            assert parent.name == span.name  # "execute_tool refund_order" in both
            assert parent.attributes is not None and span.attributes is not None
            assert (
                parent.attributes["gen_ai.tool.call.id"] == span.attributes["gen_ai.tool.call.id"]
            )


class ShopDeps:
    """Deps of the wrapped tool: the session and a voucher book the tool writes to."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.vouchers: list[tuple[str, int]] = []
        self.keys: list[str | None] = []


def lookup_customer(ctx: RunContext[ShopDeps], customer_id: str) -> dict[str, Any]:
    """Look a customer up.

    Args:
        customer_id: The customer id, e.g. CUS-1.
    """
    return {"customer_id": customer_id, "vouchers": len(ctx.deps.vouchers)}


def send_voucher(ctx: RunContext[ShopDeps], customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Send a voucher.

    Args:
        customer_id: The customer id, e.g. CUS-1.
        amount_cents: Integer cents: 5.00 is 500.
    """
    ctx.deps.vouchers.append((customer_id, amount_cents))
    guard_ctx = current_tool_context()
    assert guard_ctx is not None
    ctx.deps.keys.append(guard_ctx.idempotency_key)
    return {"sent": amount_cents}


class TestWrappedTools:
    """Existing Pydantic AI function tools behind the guard."""

    async def test_function_toolset_goes_through_the_pipeline(self) -> None:
        """Strict validation from the signature, RunContext reaches the tool, a write replays."""
        toolset = FunctionToolset([lookup_customer, send_voucher])
        specs = tool_specs(toolset, options={"send_voucher": {"effect": Effect.WRITE}})
        policy = Policy(roles={"agent": RolePolicy(tools=frozenset(s.name for s in specs))})
        guard = Guard(tools=specs, policy=policy)
        script = Script(
            iter(
                [
                    call("lookup_customer", {"customer_id": "CUS-1"}, "w1"),
                    call("send_voucher", {"customer_id": "CUS-1", "amount_cents": 5.0}, "w2"),
                    call("send_voucher", {"customer_id": "CUS-1", "amount_cents": 500}, "w3"),
                    call("send_voucher", {"customer_id": "CUS-1", "amount_cents": 500}, "w4"),
                    text("Sent."),
                ]
            )
        )
        agent = Agent(FunctionModel(script), deps_type=ShopDeps, toolsets=[GuardToolset(guard)])
        deps = ShopDeps(guard.session("conv-w", Principal(id="ops-1", role="agent")))
        result = await agent.run("Send CUS-1 a 5.00 voucher", deps=deps)

        retry = retried(result.all_messages())
        problem = json.loads(retry[0].content)["data"]["problems"][0]
        assert (
            problem["path"] == "/amount_cents" and problem["hint"] == "Integer cents: 5.00 is 500."
        )
        returns = {
            p.tool_call_id: p.content
            for p in parts(result.all_messages(), ToolReturnPart)
            if p.outcome == "success"
        }
        assert returns["w1"]["data"] == {"customer_id": "CUS-1", "vouchers": 0}
        assert returns["w4"]["replayed"] is True
        assert deps.vouchers == [("CUS-1", 500)]
        assert len(deps.keys) == 1 and deps.keys[0]  # the write got the guard's idempotency key

    def test_a_toolset_without_functions_is_refused(self) -> None:
        """An ExternalToolset has only JSON schemas: wrapping it is a configuration error."""
        external = ExternalToolset([ToolDefinition(name="remote")])
        with pytest.raises(ConfigurationError):
            tool_specs(external)

    def test_schema_is_the_signature(self) -> None:
        """The model sees the function's schema, closed, with the docstring's field hints."""
        (spec,) = tool_specs([send_voucher])
        schema = spec.json_schema
        assert schema["required"] == ["customer_id", "amount_cents"]
        assert schema["additionalProperties"] is False
        assert schema["properties"]["amount_cents"]["description"] == "Integer cents: 5.00 is 500."


class TestToolset:
    """The toolset's own settings."""

    def test_retry_budget_is_the_policy_s(self, shop: ShopApp) -> None:
        """The toolset's retry budget defaults to the policy's invalid-call budget."""
        assert GuardToolset(shop.guard).max_retries == shop_policy().max_invalid_in_a_row

    async def test_tools_subset_and_schemas(self, shop: ShopApp) -> None:
        """tools= limits what the model sees; each definition carries the argument model's schema."""
        toolset = GuardToolset(shop.guard, tools=["get_order"])
        seen: list[Any] = []

        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            seen.extend(info.function_tools)
            return text("hi")

        agent = Agent(FunctionModel(model), deps_type=Deps, toolsets=[toolset])
        await agent.run("hi", deps=Deps(session=shop.session("s", "CUS-1")))
        (definition,) = seen
        assert definition.name == "get_order"
        assert definition.parameters_json_schema["properties"]["order_id"]["pattern"]


class TestLateDecisions:
    """A decision applies only to the action it was shown: late, it is CONFIRMATION_EXPIRED."""

    @pytest.mark.parametrize("how", ["decide", "plain", "deny"])
    async def test_a_late_decision_expires(self, how: str) -> None:
        """Approved (through decide or a plain True) or denied after the window: the model reads
        CONFIRMATION_EXPIRED, the action is expired, and nothing is refunded."""
        clock = ManualClock()
        shop = build_shop(clock=clock)
        script = Script(
            iter(
                [
                    call("get_order", {"order_id": "ORD-1001"}, "c1"),
                    call("refund_order", REFUND, "c2"),
                    text("It was not done."),
                ]
            )
        )
        agent = make_agent(shop, script)
        deps = Deps(session=shop.session("conv-late", "CUS-1"))
        first = await agent.run("Refund ORD-1001", deps=deps)
        approval_id = first.output.metadata["c2"][APPROVAL_KEY]
        clock.advance(shop.guard.policy.confirmation_ttl + 1)
        if how == "plain":
            results = DeferredToolResults(approvals={"c2": True})
        else:
            results = decide(shop.guard, first.output, {"c2": how == "decide"}, by="agent-7")
        second = await agent.run(
            message_history=first.all_messages(), deferred_tool_results=results, deps=deps
        )
        (late,) = [
            p for p in parts(second.all_messages(), ToolReturnPart) if p.tool_call_id == "c2"
        ]
        assert json.loads(late.content)["code"] == "CONFIRMATION_EXPIRED"
        assert str(shop.guard.pending(approval_id).state) == "expired"
        assert shop.backend.side_effects == 0

    async def test_metadata_carries_the_escaped_question_and_facts(self, shop: ShopApp) -> None:
        """The deferred call's metadata: the question to show, identification, warnings."""
        script = Script(
            iter(
                [
                    call("get_order", {"order_id": "ORD-1001"}, "c1"),
                    call("refund_order", REFUND, "c2"),
                ]
            )
        )
        first = await make_agent(shop, script).run(
            "Refund", deps=Deps(session=shop.session("conv-q", "CUS-1"))
        )
        metadata = first.output.metadata["c2"]
        assert metadata["authenticated"] is True and metadata["warnings"] == []
        assert metadata["question"].startswith("Approve refund_order for CUS-1?")
