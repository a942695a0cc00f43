"""What a framework adapter adds per tool call, against the framework's own tool call, in one run.

For each framework, three kinds of agent run on the framework's own offline model (Pydantic AI's
FunctionModel, the Agents SDK's ScriptedModel, LangChain's GenericFakeChatModel in a LangGraph
StateGraph with a ToolNode):

- ``text``: the model answers at once (no tool call): the run's fixed cost;
- ``plain``: the model makes K parallel calls of a plain framework tool, then answers (an async
  function, so that the framework runs it on the event loop as it runs the adapter's tools, not in
  a worker thread);
- ``guard``: the same K calls of the same function declared with ``guard.tool``, through the adapter
  and the guard's full pipeline (null observer, in-memory stores).

The framework's cost per tool call is ``(plain - text) / K``; the adapter's added cost per call is
``(guard - plain) / K`` (adapter plus guard: what an engineer pays for switching callgate on); the
ratio is the second over the first. Medians over R runs of each kind, interleaved, GC on (these
are whole agent runs). Run: ``.venv/bin/python bench/adapters.py [--runs R] [--calls K]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from guard import Guard, Policy, Principal, RolePolicy, ToolContext, tool

PRINCIPAL = Principal(id="bench-1", role="bench")


class Lookup(BaseModel):
    """Look one record up."""

    model_config = ConfigDict(extra="forbid")
    n: int


CALLS = [0]
"""Calls of the tool function, to check the guard runs really reach it."""


def lookup_record(n: int) -> dict[str, Any]:
    """Look one record up by number (the plain tool: the same work as the guard tool's handler)."""
    CALLS[0] += 1
    return {"n": n, "name": f"record {n}"}


async def lookup_record_async(n: int) -> dict[str, Any]:
    """Look one record up by number."""
    return lookup_record(n)


@tool(arguments=Lookup, name="lookup")
def guarded_lookup(args: Lookup, ctx: ToolContext) -> dict[str, Any]:
    """Look one record up by number."""
    return lookup_record(args.n)


def bench_guard() -> Guard:
    policy = Policy(
        roles={"bench": RolePolicy(tools=frozenset({"lookup"}))},
        rate_limit=None,
        max_steps_per_session=1_000_000,
        max_steps_per_turn=1_000_000,
    )
    return Guard(tools=[guarded_lookup], policy=policy)


Run = Callable[[int], Awaitable[Any]]
"""One agent run of a kind; its argument is the run's number (a fresh session each time)."""


def pydantic_ai_runs(k: int, guard: Guard) -> dict[str, Run]:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from callgate.adapters.pydantic_ai import GuardToolset

    def respond(tools: bool) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
        def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            if tools and len(messages) == 1:
                calls = [ToolCallPart("lookup", {"n": i}, tool_call_id=f"c{i}") for i in range(k)]
                return ModelResponse(parts=list(calls))
            return ModelResponse(parts=[TextPart("done")])

        return model

    text = Agent(FunctionModel(respond(False)))
    plain = Agent(FunctionModel(respond(True)), tools=[Tool(lookup_record_async, name="lookup")])
    gated = Agent(FunctionModel(respond(True)), deps_type=object, toolsets=[GuardToolset(guard)])

    async def run_text(i: int) -> Any:
        return await text.run("go")

    async def run_plain(i: int) -> Any:
        return await plain.run("go")

    async def run_guard(i: int) -> Any:
        return await gated.run("go", deps=guard.session(f"pa-{i}", PRINCIPAL))

    return {"text": run_text, "plain": run_plain, "guard": run_guard}


def openai_agents_runs(k: int, guard: Guard) -> dict[str, Run]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from callgate.adapters.openai_agents import GuardTools

    set_tracing_disabled(True)  # no exporter, no network: tracing is not what is measured

    def model(tools: bool) -> ScriptedModel:
        steps: list[Any] = []
        if tools:
            steps.append([function_call("lookup", {"n": i}, call_id=f"c{i}") for i in range(k)])
        steps.append([assistant_message("done")])
        return ScriptedModel(steps)

    plain_tool = function_tool(lookup_record_async, name_override="lookup")
    gate = GuardTools(guard)

    async def run_text(i: int) -> Any:
        return await Runner.run(Agent(name="a", model=model(False)), "go")

    async def run_plain(i: int) -> Any:
        return await Runner.run(Agent(name="a", model=model(True), tools=[plain_tool]), "go")

    async def run_guard(i: int) -> Any:
        agent = Agent(name="a", model=model(True), tools=gate.tools())
        return await Runner.run(agent, "go", context=guard.session(f"oa-{i}", PRINCIPAL))

    return {"text": run_text, "plain": run_plain, "guard": run_guard}


def langgraph_runs(k: int, guard: Guard) -> dict[str, Run]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.tools import StructuredTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from callgate.adapters.langgraph import guard_tools

    def graph(tools: list[Any], with_calls: bool) -> Any:
        def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
            if with_calls and len(state["messages"]) == 1:
                calls = [{"name": "lookup", "args": {"n": i}, "id": f"c{i}"} for i in range(k)]
                replies = [AIMessage(content="", tool_calls=calls)]
            else:
                replies = [AIMessage(content="done")]
            return {"messages": [GenericFakeChatModel(messages=iter(replies)).invoke([])]}

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode(tools or [plain_tool]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        return builder.compile()

    plain_tool = StructuredTool.from_function(
        coroutine=lookup_record_async, name="lookup", description="Look one record up by number."
    )
    text, plain, gated = (
        graph([], False),
        graph([plain_tool], True),
        graph(guard_tools(guard), True),
    )
    start = {"messages": [("user", "go")]}

    async def run_text(i: int) -> Any:
        return await text.ainvoke(start)

    async def run_plain(i: int) -> Any:
        return await plain.ainvoke(start)

    async def run_guard(i: int) -> Any:
        session = guard.session(f"lg-{i}", PRINCIPAL)
        return await gated.ainvoke(start, {"configurable": {"session": session}})

    return {"text": run_text, "plain": run_plain, "guard": run_guard}


async def measure(runs: dict[str, Run], r: int) -> dict[str, float]:
    """Median microseconds of each kind of run, the kinds interleaved so load drifts hit all."""
    for i in range(3):  # warm up imports, validators, caches
        for run in runs.values():
            await run(-1 - i)
    samples: dict[str, list[int]] = {kind: [] for kind in runs}
    for i in range(r):
        for kind, run in runs.items():
            start = time.perf_counter_ns()
            await run(i)
            samples[kind].append(time.perf_counter_ns() - start)
    return {kind: statistics.median(values) / 1000 for kind, values in samples.items()}


def check(runs: dict[str, Run], k: int) -> None:
    """The guard runs really call the tool: a bench of rejections would measure the wrong thing."""
    before = CALLS[0]
    asyncio.run(runs["guard"](-100))
    if CALLS[0] - before != k:
        raise SystemExit(f"the guard run called the tool {CALLS[0] - before} times, not {k}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="agent runs of each kind")
    parser.add_argument("--calls", type=int, default=10, help="tool calls per run (K)")
    options = parser.parse_args()
    k = options.calls
    print(f"{options.runs} runs of each kind, {k} tool calls per run; medians in microseconds.")
    print("The machine is shared (other jobs run beside this one): compare the ratios, not the µs.")
    print(
        f"{'framework':<18}{'text':>9}{'plain':>9}{'guard':>9}"
        f"{'tool call':>11}{'added':>9}{'ratio':>8}"
    )
    for name, make in (
        ("pydantic-ai", pydantic_ai_runs),
        ("openai-agents", openai_agents_runs),
        ("langgraph", langgraph_runs),
    ):
        guard = bench_guard()
        runs = make(k, guard)
        check(runs, k)
        medians = asyncio.run(measure(runs, options.runs))
        per_call = (medians["plain"] - medians["text"]) / k
        added = (medians["guard"] - medians["plain"]) / k
        print(
            f"{name:<18}{medians['text']:>9.0f}{medians['plain']:>9.0f}{medians['guard']:>9.0f}"
            f"{per_call:>11.1f}{added:>9.1f}{added / per_call:>8.2f}"
        )
    print("tool call: the framework's own cost per call; added: the adapter and the guard's.")


if __name__ == "__main__":
    main()
