"""What every adapter shares: argument models from a framework's function, the result as text,
the session check on approvals, and the framework context a wrapped tool runs in.

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

from guard.codes import Code
from guard.errors import ConfigurationError
from guard.pipeline import Guard, Session
from guard.registry import Handler, ToolContext, ToolSpec
from guard.result import ToolResult
from guard.stages.idempotency import proposal_key
from guard.stores.base import PendingAction

__all__ = [
    "HUMAN_CODES",
    "ToolOptions",
    "approval_for",
    "current_framework_context",
    "current_tool_context",
    "fields_of",
    "framework_context",
    "function_spec",
    "handler_for",
    "model_text",
    "pending_for",
    "signature_model",
]

ToolOptions = Mapping[str, Mapping[str, Any]]
"""Per tool name, the ``guard.ToolSpec`` settings a framework's tool does not carry itself:
``effect``, ``risk``, ``scope``, ``check``, ``prerequisite``, ``result_model``, ``timeout``..."""

HUMAN_CODES = frozenset({Code.CONFIRMATION_REQUIRED, Code.TAINTED_CONTEXT})
"""Codes that wait for a human: the adapter hands them to the framework's human-in-the-loop."""

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


def pending_for(guard: Guard, session: Session, tool: str, arguments: Any) -> PendingAction | None:
    """The action of ``session`` waiting for a human for exactly this call, if any.

    Found by the proposal key the confirm stage filed it under (session, tool, canonical validated
    arguments), so a host can resume a run in another process without carrying the id along.
    """
    spec = guard.registry.get(tool)
    if spec is None:
        return None
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        canonical = spec.canonical(spec.validate(parsed))
    except ValueError:  # not JSON, or not valid: nothing can be pending for it
        return None
    key = proposal_key(session.id, spec.name, canonical)
    action: PendingAction | None = guard.env.approvals.find_pending(key, now=guard.env.clock.now())
    return action


def approval_for(guard: Guard, session: Session, approval_id: str, tool: str) -> str:
    """``approval_id`` if it is this session's pending action for ``tool``; else ConfigurationError.

    The host passes the id back through the framework; checking it keeps one session (or a
    mistyped id) from resuming another session's action.
    """
    action = guard.pending(approval_id)
    if action is None or action.session_id != session.id or action.tool != tool:
        raise ConfigurationError(
            f"approval {approval_id!r} is not a pending {tool!r} action of session {session.id!r}"
        )
    return approval_id


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
