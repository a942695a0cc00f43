"""callgate inside Pydantic AI: guard tools as a toolset, Pydantic AI tools behind the guard.

::

    agent = Agent(model, deps_type=Deps, toolsets=[GuardToolset(shop.guard)],
                  output_type=[str, DeferredToolRequests])
    result = await agent.run("refund ORD-1001", deps=Deps(session=shop.session("conv-1", "CUS-1")))

- **Tools.** ``GuardToolset(guard)`` lists the guard's tools with the JSON schema of their argument
  models; Pydantic AI's own argument validation is switched off for them (an any-schema validator,
  as ``ExternalToolset`` uses) so the guard's strict schema stage is the one that decides and the
  model reads its problems. ``tool_specs(toolset_or_functions, options=...)`` turns existing
  Pydantic AI function tools into ``ToolSpec``s (argument models from their signatures), so
  ``Guard(tools=tool_specs(...))`` puts every call of them through the pipeline.
- **Session.** From the run's dependencies: ``ctx.deps`` is a ``guard.Session`` or has a
  ``session`` attribute (or pass ``session=lambda ctx: ...``). No globals.
- **Results.** ``OK`` returns ``ToolResult.for_model()``. A fixable rejection (``fixable`` codes:
  invalid arguments, an unknown id, a missing prerequisite) raises ``ModelRetry``, Pydantic AI's
  idiom for "correct the call and try again", which counts against the tool's ``max_retries``
  (default: the policy's ``max_invalid_in_a_row``, after which the guard's own
  ``VALIDATION_BUDGET_EXHAUSTED`` answers first). Any other rejection raises ``ToolFailed``: the
  model sees the code and message as a failed tool result and is not asked to retry.
- **Confirmation.** ``CONFIRMATION_REQUIRED`` and ``TAINTED_CONTEXT`` raise ``ApprovalRequired``
  with the pending action as metadata, so the run ends with ``DeferredToolRequests``. The host
  decides with ``decide(guard, requests, approvals, by=...)`` and runs the agent again with the
  returned ``DeferredToolResults``: an approved call resumes the pending action inside the new
  run (rules run again, then it executes); a denied one is denied in the guard before the run.
  The approved call resumes exactly the action it was shown (the id in the metadata, else its
  tool call id), so an approval given after the window closed answers ``CONFIRMATION_EXPIRED``
  and arguments changed on approval (``override_args``) match none and are refused. The
  metadata's ``question`` is the escaped text to show the approver.
- **Tracing.** The call runs inside Pydantic AI's ``execute_tool`` span when the agent is
  instrumented, so callgate's call span (the telemetry observer parents it on the current span)
  nests under it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
)
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from callgate.adapters._common import (
    ToolOptions,
    approval_request,
    framework_context,
    function_spec,
    model_text,
    shown_action,
)
from guard.errors import ConfigurationError
from guard.pipeline import Guard, Session
from guard.providers._schema import neutral_schema
from guard.registry import ToolSpec
from guard.result import ToolResult

__all__ = ["APPROVAL_KEY", "GuardToolset", "decide", "session_from_deps", "tool_specs"]

APPROVAL_KEY = "callgate_approval_id"
"""The metadata key that carries the guard's approval id through ``DeferredToolRequests`` and back."""
APPROVER_KEY = "callgate_approved_by"

_ANY_ARGUMENTS = SchemaValidator(core_schema.dict_schema())
"""Arguments pass through as the model sent them: the guard validates them, strictly."""

SessionOf = Callable[[RunContext[Any]], Session]


def session_from_deps(ctx: RunContext[Any]) -> Session:
    """The session in the run's dependencies: ``deps`` itself, or ``deps.session``."""
    deps = ctx.deps
    session = deps if isinstance(deps, Session) else getattr(deps, "session", None)
    if not isinstance(session, Session):
        raise ConfigurationError(
            "GuardToolset needs a guard.Session: pass deps=Session or deps with a .session, "
            "or GuardToolset(session=lambda ctx: ...)"
        )
    return session


class GuardToolset(AbstractToolset[Any]):
    """The guard's tools as a Pydantic AI toolset: every call goes through the pipeline."""

    def __init__(
        self,
        guard: Guard,
        *,
        session: SessionOf = session_from_deps,
        tools: Iterable[str] | None = None,
        max_retries: int | None = None,
        id: str | None = None,
    ) -> None:
        self.guard = guard
        self.session_of = session
        self.max_retries = (
            max_retries if max_retries is not None else guard.policy.max_invalid_in_a_row
        )
        self._id = id
        names = list(tools) if tools is not None else list(guard.registry)
        self._definitions = [_definition(guard.registry[name]) for name in names]

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            definition.name: ToolsetTool(
                toolset=self,
                tool_def=definition,
                max_retries=self.max_retries,
                args_validator=_ANY_ARGUMENTS,
            )
            for definition in self._definitions
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        session = self.session_of(ctx)
        token = framework_context.set(ctx)
        try:
            if ctx.tool_call_approved:
                result = await self._resume(session, name, tool_args, ctx)
            else:
                result = await session.aexecute(name, tool_args, call_id=ctx.tool_call_id)
        finally:
            framework_context.reset(token)
        return _answer(self.guard, result)

    async def _resume(
        self, session: Session, name: str, tool_args: dict[str, Any], ctx: RunContext[Any]
    ) -> ToolResult:
        """The host approved: resume the action the approver was shown, whatever its state now.

        The action is the one ``decide`` named in the metadata, else the one this tool call was
        filed with, so plain ``DeferredToolResults(approvals={id: True})`` works too (the approver
        is then "host"). An approval given after the window closed answers CONFIRMATION_EXPIRED
        and never reaches a newer action; arguments changed on approval
        (``ToolApproved(override_args=...)``) match no action, since the approval is bound to what
        the approver was shown.
        """
        metadata = ctx.tool_call_metadata or {}
        shown = metadata.get(APPROVAL_KEY)
        action = shown_action(
            self.guard,
            session,
            name,
            tool_args,
            approval_id=None if shown is None else str(shown),
            call_id=ctx.tool_call_id,
        )
        if action is None:
            raise ConfigurationError(
                f"no {name!r} action of session {session.id!r} for these arguments "
                "(unknown approval, or arguments changed on approval)"
            )
        by = str(metadata.get(APPROVER_KEY) or "host")
        return await self.guard.aapprove(action.id, by=by)


def _definition(spec: ToolSpec) -> ToolDefinition:
    return ToolDefinition(
        name=spec.name,
        description=spec.description,
        parameters_json_schema=neutral_schema(spec),
    )


def _answer(guard: Guard, result: ToolResult) -> Any:
    if result.ok:
        return result.for_model()
    if result.needs_human and result.approval_id is not None:
        action = guard.pending(result.approval_id)
        raise ApprovalRequired(
            metadata={
                APPROVAL_KEY: result.approval_id,
                "code": str(result.code),
                "message": result.message,
                "tool": result.tool,
                **(approval_request(action) if action is not None else {}),
            }
        )
    if result.code.fixable:
        raise ModelRetry(model_text(result))
    raise ToolFailed(model_text(result))


def decide(
    guard: Guard,
    requests: DeferredToolRequests,
    approvals: Mapping[str, bool],
    *,
    by: str,
) -> DeferredToolResults:
    """The host's decisions on the calls callgate deferred, as the next run's ``deferred_tool_results``.

    ``approvals`` maps tool call ids to True (approve: the call resumes in the next run) or False
    (deny: the guard records ``CONFIRMATION_DENIED`` now, and the model reads its message). Only
    host code calls this; the model never sees it.
    """
    results: dict[str, bool | ToolApproved | ToolDenied] = {}
    metadata: dict[str, dict[str, Any]] = {}
    for call in requests.approvals:
        call_id = call.tool_call_id
        if call_id not in approvals:
            continue
        approval_id = requests.metadata.get(call_id, {}).get(APPROVAL_KEY)
        if approval_id is None:  # another toolset's approval: a plain decision
            results[call_id] = approvals[call_id]
        elif approvals[call_id]:
            results[call_id] = ToolApproved()
            metadata[call_id] = {APPROVAL_KEY: approval_id, APPROVER_KEY: by}
        else:
            denied = guard.deny(approval_id, by=by)
            results[call_id] = ToolDenied(model_text(denied))
    return DeferredToolResults(approvals=results, metadata=metadata)


def tool_specs(
    tools: AbstractToolset[Any] | Sequence[Tool[Any] | Callable[..., Any]],
    *,
    options: ToolOptions | None = None,
) -> list[ToolSpec]:
    """Pydantic AI function tools as guard tools: their signatures become strict argument models.

    A tool that takes a ``RunContext`` gets the run's context when the guard runs it. ``options``
    adds what the guard needs per tool name (``effect``, ``risk``, ``scope``, ``check``...).
    """
    options = options or {}
    if isinstance(tools, FunctionToolset):
        found = list(tools.tools.values())
    elif isinstance(tools, AbstractToolset):
        raise ConfigurationError(
            f"{tools.label} has no Python functions to build argument models from: wrap a "
            "FunctionToolset or function tools, or declare the tools with guard.tool"
        )
    else:
        found = [item if isinstance(item, Tool) else Tool(item) for item in tools]
    return [_spec(tool, options.get(tool.name, {})) for tool in found]


def _spec(tool: Tool[Any], options: Mapping[str, Any]) -> ToolSpec:
    return function_spec(
        tool.function,
        name=tool.name,
        description=tool.description,
        properties=tool.function_schema.json_schema.get("properties", {}),
        takes_context=tool.takes_ctx,
        options=options,
    )
