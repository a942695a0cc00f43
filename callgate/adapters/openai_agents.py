"""callgate inside the OpenAI Agents SDK: guard tools as function tools, SDK tools behind the guard.

::

    gate = GuardTools(shop.guard)
    agent = Agent(name="support", model=model, tools=gate.tools())
    result = await Runner.run(agent, "refund ORD-1001", context=Deps(session=session))
    for item in result.interruptions:            # CONFIRMATION_REQUIRED: ask a human
        state = result.to_state()
        gate.approve(state, item, by="agent-7")  # or gate.deny(...)
        result = await Runner.run(agent, state, context=Deps(session=session))

- **Tools.** ``gate.tools()`` gives one ``FunctionTool`` per guard tool, with the strict JSON schema
  of its argument model (``strict_json_schema`` when OpenAI's strict subset can express it). The
  SDK hands the raw argument text to ``on_invoke_tool``; the guard parses and validates it.
  ``tool_specs([function_tool, ...], options=...)`` turns existing ``@function_tool`` tools into
  ``ToolSpec``s (argument models from the decorated function's signature), so
  ``GuardTools(Guard(tools=tool_specs(...)))`` puts every call of them through the pipeline.
- **Session.** From the run context: ``context`` is a ``guard.Session`` or has a ``session``
  attribute (or pass ``session=lambda wrapper: ...``). No globals.
- **Results.** The SDK's idiom for a tool error is a string the model reads (its default
  ``failure_error_function`` does the same with exceptions); there is no tool-retry mechanism to
  plug into. Every result, accepted or not, is ``ToolResult.for_model()`` as JSON text: the code,
  the actionable message, the problems; a fixable code is fixed by the model's next call.
- **Confirmation.** A high-risk write (the tools the confirm stage always asks about) has a
  ``needs_approval`` policy that runs the call through the guard: when the guard answers
  ``CONFIRMATION_REQUIRED`` the SDK interrupts the run with a ``ToolApprovalItem``; any other
  answer (a rejection, a replay) is kept and returned by the invocation, so the pipeline runs
  once per call. ``approve``/``deny`` record the host's decision in the guard and in the
  ``RunState``; the approved call resumes inside the next run (rules again, then it executes),
  exactly the action the interruption showed: late, it answers ``CONFIRMATION_EXPIRED``.
  Lower-risk writes that a tainted session makes wait return the pending result (the approval
  id) for the host to decide with ``guard.approve``.
- **Tracing.** The SDK traces with its own processors, not OpenTelemetry. When no OpenTelemetry
  span is current, callgate's call span is parented on the SDK's trace: same trace id (the hex of
  ``trace_<32 hex>``) and the SDK's current span id, so the id in the SDK's trace viewer finds
  the call in callgate's trail and back. When the host bridges the SDK into OpenTelemetry, its
  current span wins as for any host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.function_schema import function_schema
from agents.tool_context import ToolContext
from agents.tracing import get_current_span, get_current_trace
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from callgate.adapters._common import (
    ToolOptions,
    framework_context,
    function_spec,
    model_text,
    shown_action,
)
from guard.approval_view import approval_question
from guard.errors import ConfigurationError
from guard.pipeline import Guard, Session
from guard.providers._schema import neutral_schema, strict_schema
from guard.registry import ToolSpec
from guard.result import ToolResult
from guard.stores.base import PendingAction

__all__ = ["GuardTools", "agents_trace_context", "session_from_context", "tool_specs"]

SessionOf = Callable[[RunContextWrapper[Any]], Session]

_MAX_EARLY = 10_000
"""Answers kept between the approval check and the invocation (normally one per call in flight)."""


def session_from_context(wrapper: RunContextWrapper[Any]) -> Session:
    """The session in the run's context: ``context`` itself, or ``context.session``."""
    context = wrapper.context
    session = context if isinstance(context, Session) else getattr(context, "session", None)
    if not isinstance(session, Session):
        raise ConfigurationError(
            "GuardTools needs a guard.Session: pass context=Session or a context with a "
            ".session, or GuardTools(session=lambda wrapper: ...)"
        )
    return session


class GuardTools:
    """The guard's tools as Agents SDK function tools, and the host's side of their approvals."""

    def __init__(self, guard: Guard, *, session: SessionOf = session_from_context) -> None:
        self.guard = guard
        self.session_of = session
        self._early: dict[tuple[str, str], ToolResult] = {}
        """Answers the guard gave while the SDK asked whether a call needs approval."""
        self._approvers: dict[tuple[str, str], tuple[str, str]] = {}
        """Per (session, call id) the host approved: the approval id it was shown, and by whom."""

    def tools(self, names: Iterable[str] | None = None) -> list[FunctionTool]:
        """One ``FunctionTool`` per guard tool (or per name in ``names``)."""
        registry = self.guard.registry
        return [self._tool(registry[name]) for name in (names or list(registry))]

    def _tool(self, spec: ToolSpec) -> FunctionTool:
        strict = strict_schema(spec)
        confirmed = spec.is_write and spec.risk >= self.guard.policy.confirm_at
        name = spec.name

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            return model_text(await self._invoke(name, ctx, arguments))

        async def needs_approval(
            wrapper: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            return await self._needs_approval(name, wrapper, params, call_id)

        return FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=strict if strict is not None else neutral_schema(spec),
            on_invoke_tool=invoke,
            strict_json_schema=strict is not None,
            needs_approval=needs_approval if confirmed else False,
        )

    async def _needs_approval(
        self, name: str, wrapper: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        session = self.session_of(wrapper)
        with agents_trace_context():
            result = await session.aexecute(name, params, call_id=call_id)
        if result.needs_human and result.approval_id is not None:
            return True
        if len(self._early) >= _MAX_EARLY:  # runs that stopped before invoking: keep it bounded
            self._early.clear()
        self._early[(session.id, call_id)] = result
        return False

    async def _invoke(self, name: str, ctx: ToolContext[Any], arguments: str) -> ToolResult:
        session = self.session_of(ctx)
        early = self._early.pop((session.id, ctx.tool_call_id), None)
        if early is not None:
            return early
        token = framework_context.set(ctx)
        try:
            with agents_trace_context():
                if ctx.is_tool_approved(name, ctx.tool_call_id):
                    return await self._approved(session, name, arguments, ctx.tool_call_id)
                return await session.aexecute(name, arguments, call_id=ctx.tool_call_id)
        finally:
            framework_context.reset(token)

    async def _approved(
        self, session: Session, name: str, arguments: str, call_id: str
    ) -> ToolResult:
        """Resume the action the host approved for this call, whatever its state now: an approval
        given (or a run resumed) after the window closed answers CONFIRMATION_EXPIRED, and never
        reaches a newer action nobody saw. A call the guard filed nothing for goes through the
        pipeline as any call does (invalid arguments are refused; valid ones are asked about)."""
        recorded = self._approvers.pop((session.id, call_id), None)
        shown, by = recorded if recorded is not None else (None, "host")
        action = shown_action(
            self.guard, session, name, arguments, approval_id=shown, call_id=call_id
        )
        if action is None:  # the guard never asked about it (arguments it cannot parse): it decides
            return await session.aexecute(name, arguments, call_id=call_id)
        return await self.guard.aapprove(action.id, by=by)

    # -- the host's side ----------------------------------------------------------------------------

    def pending(self, session: Session, item: ToolApprovalItem) -> PendingAction | None:
        """The guard's action behind an interruption, in whatever state it is now: what the
        approver should see (``guard.approval_view.approval_question`` renders it)."""
        if item.name is None:
            return None
        return shown_action(
            self.guard, session, item.name, item.arguments or "{}", call_id=item.call_id
        )

    def question(self, session: Session, item: ToolApprovalItem) -> str | None:
        """The escaped text to ask the approver about an interruption (``approval_question``)."""
        action = self.pending(session, item)
        return None if action is None else approval_question(action)

    def approve(
        self, state: RunState[Any], item: ToolApprovalItem, *, session: Session, by: str
    ) -> None:
        """The host approves: the SDK runs the call when the run resumes, and the guard resumes
        exactly the action this interruption showed (CONFIRMATION_EXPIRED if its window closed)."""
        action = self._action(session, item)
        self._approvers[(session.id, item.call_id or "")] = (action.id, by)
        state.approve(item)

    def deny(
        self, state: RunState[Any], item: ToolApprovalItem, *, session: Session, by: str
    ) -> None:
        """The host declines: the guard records CONFIRMATION_DENIED, the model reads its message."""
        action = self._action(session, item)
        denied = self.guard.deny(action.id, by=by)
        state.reject(item, rejection_message=model_text(denied))

    def _action(self, session: Session, item: ToolApprovalItem) -> PendingAction:
        action = self.pending(session, item)
        if action is None:
            raise ConfigurationError(f"no callgate action for call {item.call_id!r}")
        return action


@contextmanager
def agents_trace_context() -> Iterator[None]:
    """Parent callgate's spans on the Agents SDK's current trace when no OTel span is current.

    The SDK's ids are ``trace_<32 hex>`` and ``span_<24 hex>``: the trace id is an OpenTelemetry
    trace id as it is, and the first 16 hex digits of the span id serve as the parent span id.
    """
    link = None if trace.get_current_span().get_span_context().is_valid else _agents_parent()
    if link is None:
        yield
        return
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(link)))
    try:
        yield
    finally:
        otel_context.detach(token)


def _agents_parent() -> SpanContext | None:
    current = get_current_trace()
    trace_hex = _hex(getattr(current, "trace_id", None), "trace_", 32)
    if trace_hex is None:
        return None
    span = get_current_span()
    span_hex = _hex(getattr(span, "span_id", None), "span_", 24)
    return SpanContext(
        trace_id=int(trace_hex, 16),
        span_id=int(span_hex[:16], 16) if span_hex else int(trace_hex[:16], 16),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )


def _hex(value: Any, prefix: str, length: int) -> str | None:
    if not isinstance(value, str) or not value.startswith(prefix):
        return None
    digits = value[len(prefix) :]
    if len(digits) != length or not all(c in "0123456789abcdef" for c in digits):
        return None
    return digits if int(digits, 16) else None


def tool_specs(
    tools: Sequence[FunctionTool], *, options: ToolOptions | None = None
) -> list[ToolSpec]:
    """``@function_tool`` tools as guard tools: the decorated function's signature is the model.

    A tool whose function takes a ``RunContextWrapper``/``ToolContext`` gets the SDK's tool context
    when the guard runs it. ``options`` adds the guard's settings per tool name.
    """
    options = options or {}
    return [_spec(tool, options.get(tool.name, {})) for tool in tools]


def _spec(tool: FunctionTool, options: Mapping[str, Any]) -> ToolSpec:
    try:
        function: Callable[..., Any] = tool.__wrapped__
    except AttributeError:
        raise ConfigurationError(
            f"tool {tool.name!r} was not made by @function_tool: callgate needs its function"
        ) from None
    schema = function_schema(function)
    return function_spec(
        function,
        name=tool.name,
        description=tool.description,
        properties=schema.params_json_schema.get("properties", {}),
        takes_context=schema.takes_context,
        options=options,
    )
