"""The downstream MCP server: ``tools/list`` and ``tools/call`` over the gateway, and confirmation.

A call the guard lets through answers with the upstream's result unchanged, the guard's verdict in
``_meta["callgate"]``; a refused or held call is a tool error (``isError``) carrying the guard's
payload (see ``callgate.gateway.results``). A call that needs a human asks one through MCP
elicitation when the client declares it, shown the exact arguments the approval binds:

- on a handshake-era connection (2025-11-25 and before) with a back-channel, as an
  ``elicitation/create`` request during the call, answered within ``policy.elicitation_timeout``;
- on a 2026-07-28 connection, as an ``InputRequiredResult`` whose ``requestState`` is a single-use
  nonce (``callgate.gateway.questions``), never the approval id the model sees; the client retries
  the call with the human's answer, and the gateway accepts it only from a client that declared
  elicitation, for a question it asked in the same session, for the same principal and tool.

``policy.in_band_approval: false`` turns both off: only ``callgate approvals`` decides.

Accept with ``approve: true`` approves; accept with false, or decline, denies; cancel (or no answer
in time) leaves the action pending and returns the pending result with its approval id, for
``callgate approvals`` to decide. Clients without elicitation get that pending result at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.models import InitializationOptions
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context

from callgate.gateway._json import RAW_ARGUMENTS_KEY
from callgate.gateway._listing import KeepExecution
from callgate.gateway.gateway import Gateway
from callgate.gateway.proxy import handlers, logging_declared, relaying
from callgate.gateway.questions import Question
from callgate.gateway.results import caller_context, render
from guard import ToolResult
from guard.approval_view import approval_question
from guard.stores import PendingAction

__all__ = ["Identity", "build_server", "input_required"]

log = logging.getLogger("callgate.gateway")

Identity = Callable[[ServerRequestContext[Any, Any]], tuple[str, str]]
"""Who a request acts for and in which session: ``ctx -> (principal, session id)``."""

ELICITATION_KEY = "callgate_approval"
"""The key of the approval question in an ``InputRequiredResult``."""

_QUESTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run exactly the action shown, once.",
        }
    },
    "required": ["approve"],
}


class _GatewayServer(Server[Any]):
    """The SDK's server, declaring ``tools.listChanged`` on every transport (streamable HTTP builds
    its initialization options without arguments): the gateway announces listing changes."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def build_server(
    gateway: Gateway, identity: Identity, *, name: str = "callgate-gateway"
) -> Server[Any]:
    """A low-level SDK server whose two tool handlers go through ``gateway``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        principal, _ = identity(ctx)
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS and ctx.session.can_send_request:
            # One per connection (the session object is per request; its notifications go out
            # on the connection): told when the listing changes.
            gateway.listeners[id(getattr(ctx.session, "_connection", ctx.session))] = ctx.session
        return types.ListToolsResult(tools=gateway.listing(principal))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = caller_context(params.meta)
        token = otel_context.attach(caller) if caller is not None else None
        try:
            return await called(ctx, params)
        finally:
            if token is not None:
                otel_context.detach(token)

    async def called(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        principal, session_id = identity(ctx)
        structured = not gateway.lists_output_schema(params.name)

        def shown(result: ToolResult) -> types.CallToolResult:
            return render(result, structured=structured)

        in_band = gateway.config.policy.in_band_approval
        if params.request_state is not None and in_band:
            answered = await _answered(gateway, ctx, params, principal, session_id)
            if answered is not None:
                return shown(answered)
        call_id = str(ctx.request_id) if ctx.request_id is not None else None
        raw = (params.meta or {}).get(RAW_ARGUMENTS_KEY)  # set only by the transport (_json)
        arguments = raw if isinstance(raw, str) else params.arguments
        with relaying(ctx):  # the upstream's progress and log messages reach this request
            result = await gateway.call(
                principal, session_id, params.name, arguments, call_id=call_id
            )
        asked_already = params.request_state is not None  # the human cancelled: do not ask again
        if (
            not result.needs_human
            or result.approval_id is None  # never, when it needs a human; for the type checker
            or asked_already
            or not in_band
            or not _can_elicit(ctx)
        ):
            return shown(result)
        action = gateway.pending(result.approval_id)
        if action is None:
            return shown(result)
        policy = gateway.config.policy
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not ctx.session.can_send_request:
            return input_required(gateway, action, session_id, principal)
        reply = await _ask(ctx, approval_question(action), policy.elicitation_timeout)
        decided = await _apply(gateway, action, reply, principal)
        return shown(decided if decided is not None else result)

    with logging_declared():
        server = _GatewayServer(
            name,
            version=_version(),
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            **handlers(gateway, identity),  # resources, prompts, completions, logging (proxy)
        )
    server.middleware.append(KeepExecution(gateway.listed))  # after the SDK's per-version shaping
    return server


def input_required(
    gateway: Gateway, action: PendingAction, session_id: str, principal: str
) -> types.InputRequiredResult:
    """The approval question for ``action`` as a 2026-07-28 ``InputRequiredResult``: its
    ``requestState`` a single-use nonce for this session, principal and tool."""
    asked = Question(
        approval_id=action.id,
        session_id=session_id,
        principal=principal,
        tool=action.tool,
        expires_at=min(action.expires_at, time.time() + gateway.config.policy.elicitation_timeout),
    )
    return types.InputRequiredResult(
        input_requests={
            ELICITATION_KEY: types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=approval_question(action), requested_schema=_QUESTION
                )
            )
        },
        request_state=gateway.questions.ask(asked, now=time.time()),
    )


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


async def _ask(
    ctx: ServerRequestContext[Any, Any], question: str, timeout: float
) -> types.ElicitResult | None:
    """Ask over the back-channel; None when the client failed or did not answer in time."""
    with anyio.move_on_after(timeout):
        try:
            return await ctx.session.elicit_form(
                message=question, requested_schema=_QUESTION, related_request_id=ctx.request_id
            )
        except Exception:
            log.warning("elicitation failed; the action stays pending", exc_info=True)
            return None
    return None


async def _apply(
    gateway: Gateway, action: PendingAction, answer: types.ElicitResult | None, principal: str
) -> ToolResult | None:
    """Record the human's answer; None leaves the action pending."""
    if answer is None or answer.action == "cancel":
        return None
    by = f"elicitation:{principal}"
    approve = answer.action == "accept" and bool((answer.content or {}).get("approve") is True)
    return await gateway.decide(action.id, approve=approve, by=by)


async def _answered(
    gateway: Gateway,
    ctx: ServerRequestContext[Any, Any],
    params: types.CallToolRequestParams,
    principal: str,
    session_id: str,
) -> ToolResult | None:
    """A retried call carrying the human's answer (2026-07-28); None to run the call afresh.

    Only an answer to a question this gateway asked counts (see ``Questions``), and only from a
    client that declared elicitation: anything else is the client answering for the human."""
    if not _can_elicit(ctx):
        log.warning("an answer from a client without elicitation was ignored (%s)", principal)
        return None
    asked = gateway.questions.answer(
        params.request_state or "",
        session_id=session_id,
        principal=principal,
        tool=params.name,
        now=time.time(),
    )
    if asked is None:
        log.warning("an answer to no question this gateway asked was ignored (%s)", principal)
        return None
    action = gateway.pending(asked.approval_id)
    answer = (params.input_responses or {}).get(ELICITATION_KEY)
    if action is None or not isinstance(answer, types.ElicitResult):
        return None
    return await _apply(gateway, action, answer, principal)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("callgate")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout without install
        return "0"
