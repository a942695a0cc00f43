"""The gateway: upstream tools behind one guard, per principal, with pins and approvals.

Transport-free: ``callgate.gateway.server`` adapts it to MCP. The guard is rebuilt (cheaply; all
state is in the stores) whenever an upstream's listing changes, so the registry always matches
what the upstreams offer now and which definitions are blocked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import mcp_types as types

from callgate.gateway.config import GatewayConfig, PrincipalConfig, UpstreamConfig
from callgate.gateway.pins import PinStore, definition_hash, instructions, review
from callgate.gateway.policy import principal_policy
from callgate.gateway.questions import Questions
from callgate.gateway.schema import UnsupportedSchema
from callgate.gateway.tools import GatewayTool, ToolBuild, build_tool
from callgate.gateway.upstream import Upstream
from guard import (
    AmountLimit,
    ApprovalNotFound,
    Clock,
    Guard,
    GuardError,
    Observer,
    Policy,
    Principal,
    ToolResult,
    ToolSpec,
)
from guard.stages.idempotency import approval_key
from guard.stores import ApprovalState, PendingAction, Stores

__all__ = ["Gateway", "GatewayError", "Stores"]

log = logging.getLogger("callgate.gateway")


_SESSION_TTL = 86_400.0
"""How long a denial stands for its session: as long as the guard keeps a session's counters."""


def _denied_key(proposal_key: str) -> str:
    return f"gw:denied:{proposal_key}"


def _listed_as(tool: types.Tool, exposed: str, upstream: UpstreamConfig) -> types.Tool:
    """The upstream's definition under its exposed name; without ``outputSchema`` when
    ``result_fields`` cuts the result (see ``tools.filtered``)."""
    update: dict[str, Any] = {"name": exposed}
    configured = upstream.tools.get(tool.name)
    if configured is not None and configured.result_fields is not None:
        update["output_schema"] = None
    return tool.model_copy(update=update)


class GatewayError(RuntimeError):
    """The gateway cannot start as configured; the message names the tool or upstream and why."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Outstanding:
    """A pending approval this gateway created, watched until someone decides it."""

    approval_id: str
    session_id: str
    principal: str


class Gateway:
    """Every upstream tool, behind the guard, for the principals in the config."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        stores: Stores,
        pins: PinStore,
        observer: Observer | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.stores = stores
        self.pins = pins
        self.observer = observer
        self.upstreams = [Upstream(u, on_tools=self._listed) for u in config.upstreams]
        self.entries: dict[str, GatewayTool] = {}
        self.guards: dict[str, Guard] = {}
        """One guard per principal, each enforcing that principal's own allowlist (principals that
        share a role share its name on spans, never each other's tools); state is in the stores."""
        self._started = False
        self._outstanding: dict[str, Outstanding] = {}
        self._resuming: dict[str, anyio.Event] = {}
        self.listeners: dict[int, Any] = {}
        """Downstream sessions told ``notifications/tools/list_changed`` when the listing changes."""
        self._listed_as: frozenset[tuple[str, bool, str]] = frozenset()
        self._group: anyio.abc.TaskGroup | None = None
        self.questions = Questions()
        """Approval questions asked through clients, by the nonce each answer must carry."""

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Connect every upstream, pin or check each definition, build the guard; ``GatewayError`` if not."""
        self._group = group
        for upstream in self.upstreams:
            try:
                await upstream.start(group)
            except ConnectionError as err:
                where = upstream.config.url or " ".join(upstream.config.command or ())
                cause = str(err).removeprefix(f"{upstream.name}: ")
                raise GatewayError(f"upstream {upstream.name!r} ({where}): {cause}") from err
        problems = [p for u in self.upstreams for p in self._index(u, refuse=True)]
        if problems:
            raise GatewayError("refused at startup:\n  " + "\n  ".join(problems))
        self._check_allowlists()
        self._rebuild()
        self._started = True
        for upstream in self.upstreams:
            if upstream.tools and all(tool.annotations is None for tool in upstream.tools):
                log.warning(
                    "upstream %s declares no annotations: its %d tools count as destructive "
                    "writes, so every call of them (reads too) waits for a human at confirm_at "
                    "%s; set effect: read per tool in the config",
                    upstream.name,
                    len(upstream.tools),
                    self.config.policy.confirm_at,
                )

    async def stop(self) -> None:
        for upstream in self.upstreams:
            await upstream.stop()

    async def watch_approvals(self, interval: float = 0.25, *, drain: float = 30.0) -> None:
        """Run decided approvals as soon as someone decides them (``callgate approvals approve``).

        Cancelling the watcher (the gateway stopping) waits up to ``drain`` seconds for the runs
        already started: a write cut off at shutdown would leave an outcome nobody knows.
        """
        while True:
            await anyio.sleep(interval)
            with anyio.CancelScope(shield=True) as running:
                running.deadline = anyio.current_time() + drain
                try:
                    await self.run_decided()
                except Exception:
                    log.exception("watching approvals failed")

    # -- what each principal sees -----------------------------------------------------------------

    def principal(self, name: str) -> Principal:
        config = self.config.principals[name]
        return Principal(id=name, role=config.role or name, scopes=config.scopes)

    def allowed(self, principal: str) -> list[GatewayTool]:
        """The tools ``principal`` may call now: on its allowlist, with its scope, not blocked."""
        config = self.config.principals[principal]
        names = self._names_for(config)
        return [
            entry
            for name, entry in self.entries.items()
            if name in names
            and entry.spec is not None
            and not entry.blocked
            and (entry.spec.scope is None or entry.spec.scope in config.scopes)
        ]

    def listing(self, principal: str) -> list[types.Tool]:
        """``tools/list`` for ``principal``: each upstream definition as listed, under its exposed
        name (title, schemas, annotations, ``execution`` and ``_meta`` unchanged: the gateway's
        risk classification is its own policy and never rewrites the upstream's hints)."""
        for entry in [e for e in self.entries.values() if e.blocked]:
            self._recheck_pin(entry)  # re-pinned since: listed again, no blind call needed
        return [entry.listed for entry in self.allowed(principal) if entry.listed is not None]

    def listed(self, name: str) -> types.Tool | None:
        """The ``tools/list`` entry of the tool exposed as ``name``; None when there is none."""
        entry = self.entries.get(name)
        return entry.listed if entry is not None else None

    def lists_output_schema(self, name: str) -> bool:
        """Whether the tool ``name`` is listed with an ``outputSchema`` (its clients validate
        ``structuredContent`` against it, so the gateway never sends them a shape of its own)."""
        entry = self.entries.get(name)
        return entry is not None and entry.listed is not None and bool(entry.listed.output_schema)

    # -- calls ------------------------------------------------------------------------------------

    async def call(
        self,
        principal: str,
        session_id: str,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """One ``tools/call`` through the whole pipeline. Never raises for anything the client sent.

        ``arguments`` is text when the transport kept the client's own (duplicate keys: see
        ``_json``), so the guard's parse stage refuses it."""
        if not isinstance(arguments, str):
            arguments = dict(arguments or {})
        if self._outstanding:
            await self.run_decided()
        for running in list(self._resuming.values()):
            # A re-proposal while its approved twin still runs would find no pending action and
            # ask again: let the approved call finish and record its result for the replay first.
            await running.wait()
        entry = self.entries.get(name)
        if entry is not None and entry.blocked:
            self._recheck_pin(entry)
        guard = self.guards[principal]
        session = guard.session(session_id, self.principal(principal))
        result = await session.aexecute(name, arguments, call_id=call_id)
        if not result.needs_human or result.approval_id is None:
            return result
        action = guard.pending(result.approval_id)
        if action is None or action.state is not ApprovalState.PENDING:
            return result
        if self.stores.counters.get(_denied_key(action.proposal_key), now=self.now()):
            # A human already said no to exactly this in this session: answer that, ask nobody.
            return guard.deny(action.id, by="gateway: denied before in this session")
        if not await self._still_current(name):
            # The definition changed upstream since the call was checked: no human is asked to
            # approve a call to a tool that is no longer what was reviewed.
            guard.deny(action.id, by="gateway: the tool's definition changed")
            again = self.guards[principal].session(session_id, self.principal(principal))
            return await again.aexecute(name, arguments, call_id=call_id)
        self._outstanding.setdefault(
            action.id,
            Outstanding(approval_id=action.id, session_id=session_id, principal=principal),
        )
        return result

    async def _still_current(self, name: str) -> bool:
        """List the tool's upstream again (a re-index blocks a changed definition); False if blocked."""
        entry = self.entries.get(name)
        if entry is None:
            return False
        try:
            await entry.upstream.relist()
        except Exception:  # unreachable now: the call re-checks its pin when it runs
            log.warning("could not re-list %s before asking", entry.upstream.name, exc_info=True)
        now = self.entries.get(name)
        return now is not None and not now.blocked

    async def _announce(self, key: int, session: Any) -> None:
        try:
            await session.send_tool_list_changed()
        except Exception:  # a client that went away: forget it
            self.listeners.pop(key, None)

    def now(self) -> float:
        return self.clock.now() if self.clock is not None else time.time()

    def remember_denied(self, action: PendingAction) -> None:
        """Re-proposing a denied call in its session answers CONFIRMATION_DENIED from now on."""
        if action.state is ApprovalState.DENIED:
            ttl = self.config.policy.confirmation_ttl + _SESSION_TTL
            self.stores.counters.incr(_denied_key(action.proposal_key), now=self.now(), ttl=ttl)

    def adopt(self, actions: list[PendingAction]) -> int:
        """Watch pending actions an earlier gateway process left in the store, and approved ones
        that never ran (approved while no gateway ran, or the one that held them died before
        running them); remember the denied ones. How many are watched: the watcher runs the
        approved ones at once, through the guard (seal checked, rules re-run), under the
        approval's own key, so two gateways adopting the same action run it once."""
        adopted = 0
        for action in actions:
            self.remember_denied(action)
            if action.tool in self.entries and (
                action.state is ApprovalState.PENDING or self._approved_not_run(action)
            ):
                self._outstanding[action.id] = Outstanding(
                    approval_id=action.id,
                    session_id=action.session_id,
                    principal=action.principal_id,
                )
                adopted += 1
        return adopted

    def _approved_not_run(self, action: PendingAction) -> bool:
        """Approved, and its key holds no result: it never ran, or its run was cut off (the
        guard then finds the dead claim and answers as its tool's backend allows)."""
        if action.state is not ApprovalState.APPROVED:
            return False
        record = self.stores.idempotency.record(approval_key(action.id))
        return record is None or record.result is None

    def pending(self, approval_id: str) -> PendingAction | None:
        return self.stores.approvals.get(approval_id)

    async def decide(self, approval_id: str, *, approve: bool, by: str) -> ToolResult:
        """A human decided through the client (elicitation): record it and run or end the call."""
        action = self.stores.approvals.get(approval_id)
        if action is None:
            raise ApprovalNotFound(approval_id)
        guard = self.guards[action.principal_id]
        self._outstanding.pop(approval_id, None)
        if approve:
            return await guard.aapprove(approval_id, by=by)
        result = guard.deny(approval_id, by=by)
        if (denied := self.stores.approvals.get(approval_id)) is not None:
            self.remember_denied(denied)
        return result

    async def run_decided(self) -> list[ToolResult]:
        """Resume every watched approval that was decided (or expired) elsewhere."""
        results = []
        now = self.now()
        for approval_id in list(self._outstanding):
            action = self.stores.approvals.get(approval_id)
            if action is None:
                self._outstanding.pop(approval_id, None)
                continue
            if action.state is ApprovalState.PENDING and action.expires_at >= now:
                continue
            if self._outstanding.pop(approval_id, None) is None:
                continue  # the watcher and a call raced: the other one resumes it
            guard = self.guards.get(action.principal_id)
            if guard is None:  # a principal the config no longer names: nothing may run for it
                log.warning("approval %s is for unknown principal; not run", approval_id)
                continue
            self.remember_denied(action)
            done = self._resuming[approval_id] = anyio.Event()
            try:
                # Already decided: the store returns the decision unchanged and the guard acts on it.
                results.append(await guard.aapprove(approval_id, by=action.decided_by or "expiry"))
            except ApprovalNotFound:
                continue
            finally:
                self._resuming.pop(approval_id, None)
                done.set()
        return results

    # -- pins and the registry --------------------------------------------------------------------

    def _index(self, upstream: Upstream, *, refuse: bool) -> list[str]:
        """Rebuild ``entries`` for one upstream from its listing; the problems found, by tool."""
        config = upstream.config
        problems: list[str] = []
        fresh: dict[str, GatewayTool] = {}
        for tool in upstream.tools:
            if config.tools.get(tool.name) is not None and config.tools[tool.name].hidden:
                continue
            definition = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
            definition.pop("_meta", None)
            key = f"{upstream.name}/{tool.name}"
            exposed = config.exposed(tool.name)
            verdict = review(self.pins, key, exposed, definition, instructions(definition))
            entry = GatewayTool(
                exposed=exposed,
                upstream=upstream,
                upstream_name=tool.name,
                definition=definition,
                pin_key=key,
                current_hash=definition_hash(definition),
                blocked=verdict.blocked,
                pins_seen=verdict.seen,
            )
            if entry.blocked:
                log.warning("tool %s is blocked: %s", entry.exposed, verdict.why)
            entry.listed = _listed_as(tool, exposed, config)
            try:
                entry.spec, entry.limit = build_tool(entry, tool, config, self._build())
            except (UnsupportedSchema, ValueError, GuardError) as err:
                # Whatever one tool's definition holds, it refuses that tool, never the re-index:
                # the other tools' pins must still be checked.
                if refuse:
                    problems.append(str(err))
                    continue
                log.error("tool %s is blocked: %s", entry.exposed, err)
                entry.blocked = True
                entry.spec, entry.limit = build_tool(entry, tool, config, self._build())
            if entry.exposed in fresh or any(
                e.exposed == entry.exposed and e.upstream is not upstream
                for e in self.entries.values()
            ):
                problems.append(
                    f"tool {entry.exposed!r} is offered twice; give an upstream a namespace"
                )
                continue
            fresh[entry.exposed] = entry
        configured = set(config.tools) - {t.name for t in upstream.tools}
        for missing in sorted(configured):
            log.warning("upstream %s has no tool %r named in the config", upstream.name, missing)
        self.entries = {
            **{k: v for k, v in self.entries.items() if v.upstream is not upstream},
            **fresh,
        }
        return problems

    async def _listed(self, upstream: Upstream, tools: list[types.Tool]) -> None:
        """A (re)connect or list_changed brought a new listing: re-index, re-check pins, rebuild."""
        if not self._started:
            return
        for problem in self._index(upstream, refuse=False):
            log.error("%s", problem)
        self._rebuild()

    def _recheck_pin(self, entry: GatewayTool) -> None:
        """An operator may have re-pinned a blocked tool since: re-judge it, and rebuild."""
        seen = (
            pin.hash if (pin := self.pins.get(entry.pin_key)) is not None else None,
            owner.hash if (owner := self.pins.get(f"name:{entry.exposed}")) is not None else None,
        )
        if seen != entry.pins_seen:
            log.info("tool %s re-pinned: judged again", entry.exposed)
            self._index(entry.upstream, refuse=False)
            self._rebuild()

    def _build(self) -> ToolBuild:
        return ToolBuild(counters=self.stores.counters, current=lambda name: self.entries.get(name))

    def _rebuild(self) -> None:
        listed = frozenset((e.exposed, e.blocked, e.current_hash) for e in self.entries.values())
        if self._started and listed != self._listed_as and self._group is not None:
            for key, session in list(self.listeners.items()):  # the clients re-list and see it
                self._group.start_soon(self._announce, key, session)
        self._listed_as = listed
        specs: list[ToolSpec] = []
        limits: list[AmountLimit] = []
        for entry in self.entries.values():
            if entry.spec is None:
                continue
            specs.append(entry.spec)
            if entry.limit is not None and not entry.blocked:
                limits.append(entry.limit)
        shadow = self._shadow(specs)
        self.guards = {
            name: Guard(
                tools=specs,
                policy=self._policy(principal, specs, limits),
                idempotency=self.stores.idempotency,
                approvals=self.stores.approvals,
                counters=self.stores.counters,
                observer=self.observer,
                clock=self.clock,
                shadow=shadow,
            )
            for name, principal in self.config.principals.items()
        }

    def _shadow(self, specs: list[ToolSpec]) -> bool | frozenset[str]:
        shadow = self.config.policy.shadow
        if isinstance(shadow, bool):
            return shadow
        return frozenset(shadow) & {spec.name for spec in specs}

    def _policy(
        self, principal: PrincipalConfig, specs: list[ToolSpec], limits: list[AmountLimit]
    ) -> Policy:
        """The guard policy of one principal: its own allowlist under its role's name."""
        tools = frozenset(n for n in self._names_for(principal) if n in self.entries)
        return principal_policy(
            self.config.policy, principal.role or principal.name, tools, specs, limits
        )

    def _names_for(self, principal: PrincipalConfig) -> frozenset[str]:
        if "*" in principal.tools:
            return frozenset(self.entries)
        return frozenset(principal.tools)

    def _check_allowlists(self) -> None:
        shadow = self.config.policy.shadow
        if not isinstance(shadow, bool) and (unknown := sorted(set(shadow) - set(self.entries))):
            raise GatewayError(f"policy.shadow names {unknown}, which no upstream offers")
        for principal in self.config.principals.values():
            unknown = sorted(set(principal.tools) - {"*"} - set(self.entries))
            if unknown:
                raise GatewayError(
                    f"principal {principal.name!r} may call {unknown}, which no upstream offers "
                    f"(tools: {', '.join(sorted(self.entries)) or 'none'})"
                )
