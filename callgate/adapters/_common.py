"""What every adapter shares: argument models from a framework's function, the result as text,
the action a decision was shown, and the framework context a wrapped tool runs in.

A framework's own tool becomes a ``guard.ToolSpec`` whose argument model is built from the
function's signature (the same annotations the framework reads), closed with ``extra="forbid"``
and validated strictly by the guard's schema stage; its handler calls the original function.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from guard.approval_view import approval_question
from guard.errors import ConfigurationError
from guard.pipeline import Guard, Session
from guard.registry import Handler, ToolContext, ToolSpec
from guard.result import ToolResult
from guard.stages.idempotency import proposal_key
from guard.stores.base import PendingAction

__all__ = [
    "ToolOptions",
    "approval_request",
    "current_framework_context",
    "current_tool_context",
    "fields_of",
    "framework_context",
    "function_spec",
    "handler_for",
    "model_text",
    "pending_for",
    "shown_action",
    "signature_model",
]

ToolOptions = Mapping[str, Mapping[str, Any]]
"""Per tool name, the ``guard.ToolSpec`` settings a framework's tool does not carry itself:
``effect``, ``risk``, ``scope``, ``check``, ``prerequisite``, ``result_model``, ``timeout``..."""

framework_context: ContextVar[Any] = ContextVar("callgate_framework_context", default=None)
"""The framework's context object for the call the guard is running (a ``RunContext``, a
``ToolContext``, a ``RunnableConfig``): a wrapped tool that takes one gets it from here."""


guard_context: ContextVar[ToolContext | None] = ContextVar("callgate_guard_context", default=None)
"""The guard's ``ToolContext`` of the attempt a wrapped tool is running in."""


def current_framework_context() -> Any:
    """The framework context of the call being run, or None outside one."""
    return framework_context.get()


def current_tool_context() -> ToolContext | None:
    """For a framework tool the guard runs: the guard's ``ToolContext`` of this attempt.

    A wrapped write sends ``current_tool_context().idempotency_key`` to its backend, the same key on
    every retry of the call, as guard tools do with ``ctx.idempotency_key``.
    """
    return guard_context.get()


def model_text(result: ToolResult) -> str:
    """The result as the model reads it: code, message, data, as compact JSON."""
    return json.dumps(result.for_model(), ensure_ascii=False, separators=(",", ":"), default=str)


def signature_model(
    function: Callable[..., Any],
    *,
    name: str,
    skip: int = 0,
    descriptions: Mapping[str, str] | None = None,
) -> type[BaseModel]:
    """A closed pydantic model of ``function``'s parameters (after the first ``skip``).

    Annotations are resolved as the framework resolves them; a parameter without one is ``Any``.
    ``descriptions`` (from the framework's parsed docstring) become the fields' hints, which the
    guard quotes back when a field is wrong.
    """
    hints = typing.get_type_hints(function, include_extras=True)
    descriptions = descriptions or {}
    fields: dict[str, Any] = {}
    parameters = list(inspect.signature(function).parameters.values())[skip:]
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ConfigurationError(f"tool {name!r}: *args and **kwargs cannot be validated")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (
            hints.get(parameter.name, Any),
            Field(default, description=descriptions.get(parameter.name)),
        )
    title = "".join(part.title() for part in name.split("_")) + "Arguments"
    model: type[BaseModel] = create_model(title, __config__=ConfigDict(extra="forbid"), **fields)
    return model


def fields_of(arguments: BaseModel) -> dict[str, Any]:
    """Validated arguments as keyword arguments, typed (nested models stay models)."""
    return {name: getattr(arguments, name) for name in type(arguments).model_fields}


def handler_for(call: Callable[[BaseModel], Any], *, is_async: bool) -> Handler:
    """A guard handler that runs ``call`` on the validated arguments (awaiting it if ``is_async``)."""
    if is_async:

        async def run_async(args: BaseModel, ctx: ToolContext) -> Any:
            token = guard_context.set(ctx)
            try:
                return await call(args)
            finally:
                guard_context.reset(token)

        return run_async

    def run(args: BaseModel, ctx: ToolContext) -> Any:
        token = guard_context.set(ctx)
        try:
            return call(args)
        finally:
            guard_context.reset(token)

    return run


def _proposal(guard: Guard, session: Session, tool: str, arguments: Any) -> str | None:
    """The proposal key the confirm stage files this call under (session, tool, canonical
    validated arguments); None when the arguments are not valid, so nothing is filed for them."""
    spec = guard.registry.get(tool)
    if spec is None:
        return None
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        canonical = spec.canonical(spec.validate(parsed))
    except ValueError:  # not JSON, or not valid: nothing can be pending for it
        return None
    return proposal_key(session.id, spec.name, canonical)


def pending_for(guard: Guard, session: Session, tool: str, arguments: Any) -> PendingAction | None:
    """The action of ``session`` waiting for a human for exactly this call, if any.

    Found by the proposal key the confirm stage filed it under (session, tool, canonical validated
    arguments), so a host can resume a run in another process without carrying the id along.
    """
    key = _proposal(guard, session, tool, arguments)
    if key is None:
        return None
    action: PendingAction | None = guard.env.approvals.find_pending(key, now=guard.env.clock.now())
    return action


def shown_action(
    guard: Guard,
    session: Session,
    tool: str,
    arguments: Any,
    *,
    approval_id: str | None = None,
    call_id: str | None = None,
) -> PendingAction | None:
    """The action a human's decision on this call was about, in whatever state it is now.

    A decision applies to the exact action it was shown, never to a newer one filed for the same
    arguments after the first expired: so it is found by the ``approval_id`` shown (when the
    framework carries it back), checked to be this session's action for this tool and these
    arguments; else by the model's ``call_id``, the call the framework asked about; else, for a
    repeated proposal (which reuses the first call's action), the one pending now. Approving what
    this returns runs it, or answers CONFIRMATION_EXPIRED if the window closed meanwhile. None:
    no action of this call (arguments changed on approval, or another session's id).
    """
    key = _proposal(guard, session, tool, arguments)
    if key is None:
        return None
    if approval_id is not None:
        action = guard.pending(approval_id)
        return action if action is not None and action.proposal_key == key else None
    if call_id is not None:
        for action in reversed(guard.env.approvals.filed(key)):
            if action.call_id == call_id:
                return action
    found: PendingAction | None = guard.env.approvals.find_pending(key, now=guard.env.clock.now())
    return found


def approval_request(action: PendingAction) -> dict[str, Any]:
    """What a framework's human-in-the-loop shows: the facts, and the escaped question to ask."""
    return {
        "approval_id": action.id,
        "tool": action.tool,
        "arguments": action.arguments,
        "reason": action.reason,
        "expires_at": action.expires_at,
        "authenticated": action.authenticated,
        "warnings": json.loads(action.warnings),
        "question": approval_question(action),
    }


def function_spec(
    function: Callable[..., Any],
    *,
    name: str,
    description: str | None,
    properties: Mapping[str, Any],
    takes_context: bool,
    options: Mapping[str, Any],
) -> ToolSpec:
    """A framework's function tool as a guard tool.

    The function's signature is the strict argument model (its first parameter skipped when it
    takes the framework's run context), with the descriptions of the framework's JSON schema as
    hints; the handler calls the function with the validated values, the framework's context first
    when it takes one. ``options`` adds the guard's settings (effect, risk, scope, check...).
    """
    descriptions = {
        field: prop["description"] for field, prop in properties.items() if "description" in prop
    }
    arguments = signature_model(
        function, name=name, skip=1 if takes_context else 0, descriptions=descriptions
    )

    def call(args: BaseModel) -> Any:
        values = fields_of(args)
        if takes_context:
            return function(framework_context.get(), **values)
        return function(**values)

    return ToolSpec(
        name=name,
        description=description or name,
        arguments=arguments,
        handler=handler_for(call, is_async=inspect.iscoroutinefunction(function)),
        **options,
    )
