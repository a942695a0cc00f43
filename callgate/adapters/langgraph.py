"""callgate inside LangGraph and LangChain: guard tools as ``BaseTool``s, LangChain tools behind the guard.

::

    tools = guard_tools(shop.guard)                  # BaseTools: use them in a ToolNode
    graph = builder.compile(checkpointer=InMemorySaver())
    state = graph.invoke({"messages": [...]}, config, context=Deps(session=session))
    if "__interrupt__" in state:                     # CONFIRMATION_REQUIRED: ask a human
        state = graph.invoke(Command(resume=decision(True, by="agent-7")), config, context=...)

- **Tools.** ``guard_tools(guard)`` gives one ``GuardTool`` per guard tool. Its ``args_schema`` is
  the argument model's JSON schema as a dict, so LangChain passes the model's arguments through
  untouched (no lax pydantic coercion of ``"2590"``) and the guard's strict schema stage decides.
  ``tool_specs([base_tool, ...], options=...)`` turns existing LangChain tools into ``ToolSpec``s
  (their ``tool_call_schema`` closed with ``extra="forbid"``), so ``guard_tools(Guard(tools=...))``
  puts every call of them through the pipeline; the original tool runs with the caller's config.
- **Session.** From the run: LangGraph's runtime context (``graph.invoke(..., context=deps)``,
  a ``guard.Session`` or an object with ``.session``), else ``config["configurable"]["session"]``
  for plain LangChain. No globals.
- **Results.** LangChain's tool-error idiom: a rejection raises ``ToolException`` with the code and
  message as JSON text, and the tool (``handle_tool_error=True``) turns it into a ``ToolMessage``
  with ``status="error"`` the model reads; ``OK`` is the same JSON as content. LangChain has no
  tool-retry mechanism of its own; a fixable code is fixed by the model's next call.
- **Confirmation.** Inside a LangGraph run, ``CONFIRMATION_REQUIRED`` (and ``TAINTED_CONTEXT``)
  calls ``langgraph.types.interrupt`` with the pending action (needs a checkpointer). The host
  resumes with ``Command(resume=decision(approved, by=..., approval_id=...))``: approved resumes
  the pending action (rules again, then it executes), declined records ``CONFIRMATION_DENIED``.
  On resumption the tool node runs again: the tool finds the action of this call (its arguments
  and call id, in any state) and goes straight to the decision, so the pipeline does not count
  the proposal twice, and an answer given after the window closed is ``CONFIRMATION_EXPIRED``:
  it never approves a newer action nobody saw. The interrupt's ``question`` is the escaped text
  to show the approver (``guard.approval_view``). With ``interrupts=False`` (plain LangChain), the
  model gets the pending result instead.
- **Tracing.** When LangChain is traced with OpenTelemetry by a callback handler that tracks its
  spans by run instead of making them current (OpenInference's LangChain instrumentation),
  callgate's call span is parented on the tool run's span; a current OTel span always wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool, ToolException
from opentelemetry import context as otel_context
from opentelemetry import trace
from pydantic import BaseModel

from callgate.adapters._common import (
    ToolOptions,
    approval_request,
    fields_of,
    framework_context,
    handler_for,
    model_text,
    shown_action,
)
from guard.errors import ConfigurationError
from guard.pipeline import Guard, Session
from guard.providers._schema import neutral_schema
from guard.registry import ToolSpec
from guard.result import ToolResult
from guard.stores.base import ApprovalState, PendingAction

__all__ = ["GuardTool", "decision", "guard_tools", "session_from_run", "tool_specs"]

SessionOf = Callable[[RunnableConfig], Session]


def session_from_run(config: RunnableConfig) -> Session:
    """The session of the run: LangGraph's runtime context, else ``configurable["session"]``."""
    found: Any = None
    context = getattr(_runtime(), "context", None)
    if context is not None:
        found = context if isinstance(context, Session) else getattr(context, "session", None)
    if found is None:
        found = (config.get("configurable") or {}).get("session")
    if not isinstance(found, Session):
        raise ConfigurationError(
            "GuardTool needs a guard.Session: graph.invoke(..., context=deps) with deps.session, "
            "config={'configurable': {'session': ...}}, or guard_tools(session=...)"
        )
    return found


def _runtime() -> Any:
    try:
        from langgraph.runtime import get_runtime
    except ImportError:  # plain LangChain
        return None
    try:
        return get_runtime()
    except (RuntimeError, KeyError):  # not inside a graph run
        return None


def decision(approved: bool, *, by: str, approval_id: str | None = None) -> dict[str, Any]:
    """The host's answer to a callgate interrupt, for ``Command(resume=...)``.

    ``approval_id`` (the interrupt's ``approval_id``) binds the answer to the action shown; without
    it the answer applies to the action of the interrupted call, found by its call id."""
    answer: dict[str, Any] = {"approved": approved, "by": by}
    if approval_id is not None:
        answer["approval_id"] = approval_id
    return answer


class GuardTool(BaseTool):
    """One guard tool as a LangChain tool: every call goes through the pipeline."""

    guard: Guard
    spec: ToolSpec
    session_of: SessionOf = session_from_run
    interrupts: bool = True
    handle_tool_error: Any = True

    model_config = {"arbitrary_types_allowed": True}

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The arguments go to the guard as the model sent them, with the model's call id.
        return (), {"arguments": tool_input, "call_id": tool_call_id}

    def _run(self, arguments: Any, call_id: str | None, config: RunnableConfig) -> str:
        session = self.session_of(config)
        token = framework_context.set(config)
        try:
            with _tool_span_current():
                action = self._waiting(session, arguments, call_id)
                if action is None:
                    result = session.execute(self.name, arguments, call_id=call_id)
                    action = self._asks_human(result)
                    if action is None:
                        return _answer(result)
                approve, approval_id, by = self._decision(session, arguments, action)
                if approve:
                    return _answer(self.guard.approve(approval_id, by=by))
                return _answer(self.guard.deny(approval_id, by=by))
        finally:
            framework_context.reset(token)

    async def _arun(self, arguments: Any, call_id: str | None, config: RunnableConfig) -> str:
        session = self.session_of(config)
        token = framework_context.set(config)
        try:
            with _tool_span_current():
                action = self._waiting(session, arguments, call_id)
                if action is None:
                    result = await session.aexecute(self.name, arguments, call_id=call_id)
                    action = self._asks_human(result)
                    if action is None:
                        return _answer(result)
                approve, approval_id, by = self._decision(session, arguments, action)
                if approve:
                    return _answer(await self.guard.aapprove(approval_id, by=by))
                return _answer(await self.guard.adeny(approval_id, by=by))
        finally:
            framework_context.reset(token)

    def _waiting(
        self, session: Session, arguments: Any, call_id: str | None
    ) -> PendingAction | None:
        """The action of this very call when the graph re-runs it after an interrupt.

        Found by the model's call id in any state, so a decision given after the window closed
        reaches the expired action it was shown (CONFIRMATION_EXPIRED), not a fresh proposal."""
        if not (self.interrupts and self.spec.is_write):
            return None
        return shown_action(self.guard, session, self.name, arguments, call_id=call_id)

    def _decision(
        self, session: Session, arguments: Any, action: PendingAction
    ) -> tuple[bool, str, str]:
        """Whether to approve, which action, and who decided: asked through an interrupt while the
        action waits; an action decided already (``callgate approvals``, or expired) resumes to its
        decision without asking again. A decision naming another approval id than the one asked
        about applies to that one, if it is this call's (a late answer to an earlier question)."""
        if action.state is not ApprovalState.PENDING:
            return True, action.id, "host"  # the store keeps the decision made; nothing new
        approved, by, shown = self._ask(action)
        if shown is None or shown == action.id:
            return approved, action.id, by
        earlier = shown_action(self.guard, session, self.name, arguments, approval_id=shown)
        if earlier is None:
            raise ConfigurationError(f"the decision names approval {shown!r}, not one of this call")
        return approved, earlier.id, by

    def _asks_human(self, result: ToolResult) -> PendingAction | None:
        if not self.interrupts or not result.needs_human or result.approval_id is None:
            return None
        return self.guard.pending(result.approval_id)

    def _ask(self, action: PendingAction) -> tuple[bool, str, str | None]:
        from langgraph.types import interrupt  # LangGraph only when interrupts are on

        answer = interrupt(approval_request(action))
        if not isinstance(answer, Mapping) or not isinstance(answer.get("approved"), bool):
            raise ConfigurationError(
                "resume a callgate interrupt with Command(resume=decision(...))"
            )
        shown = answer.get("approval_id")
        return (
            answer["approved"],
            str(answer.get("by") or "host"),
            None if shown is None else str(shown),
        )


def _answer(result: ToolResult) -> str:
    if result.ok or result.needs_human:
        return model_text(result)  # the pending result, when interrupts are off
    raise ToolException(model_text(result))


def guard_tools(
    guard: Guard,
    *,
    session: SessionOf = session_from_run,
    names: Sequence[str] | None = None,
    interrupts: bool = True,
) -> list[GuardTool]:
    """One ``GuardTool`` per guard tool (or per name in ``names``)."""
    registry = guard.registry
    return [
        GuardTool(
            name=spec.name,
            description=spec.description,
            args_schema=neutral_schema(spec),
            guard=guard,
            spec=spec,
            session_of=session,
            interrupts=interrupts,
        )
        for spec in (registry[name] for name in (names or list(registry)))
    ]


@contextmanager
def _tool_span_current() -> Iterator[None]:
    """Make the tool run's OTel span current when an instrumentation tracks it but did not."""
    if trace.get_current_span().get_span_context().is_valid:
        yield
        return
    span = _instrumentation_span()
    if span is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield
    finally:
        otel_context.detach(token)


def _instrumentation_span() -> trace.Span | None:
    """The tool run's span, from a LangChain callback handler that tracks OTel spans by run id
    (``get_span(run_id)``, as OpenInference's ``OpenInferenceTracer`` does)."""
    config = var_child_runnable_config.get()
    manager = config.get("callbacks") if isinstance(config, dict) else None
    run_id = getattr(manager, "parent_run_id", None)
    if run_id is None:
        return None
    for handler in getattr(manager, "handlers", ()):
        get_span = getattr(handler, "get_span", None)
        if callable(get_span):
            span = get_span(run_id)
            if isinstance(span, trace.Span):
                return span
    return None


def tool_specs(tools: Sequence[BaseTool], *, options: ToolOptions | None = None) -> list[ToolSpec]:
    """LangChain tools as guard tools: each tool's call schema, closed, is the argument model.

    The guard runs the original tool with ``invoke`` and the caller's config, after strict
    validation. ``options`` adds the guard's settings per tool name.
    """
    options = options or {}
    return [_spec(tool, options.get(tool.name, {})) for tool in tools]


def _spec(tool: BaseTool, options: Mapping[str, Any]) -> ToolSpec:
    schema = tool.tool_call_schema
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        raise ConfigurationError(
            f"tool {tool.name!r} has a JSON-schema args_schema: callgate needs a pydantic model"
        )
    config = {**schema.model_config, "extra": "forbid"}
    title = "".join(part.title() for part in tool.name.split("_")) + "Arguments"
    arguments = type(title, (schema,), {"model_config": config, "__module__": __name__})

    def call(args: BaseModel) -> Any:
        return tool.invoke(fields_of(args), config=framework_context.get())

    return ToolSpec(
        name=tool.name,
        description=tool.description or tool.name,
        arguments=arguments,
        handler=handler_for(call, is_async=False),
        **options,
    )
