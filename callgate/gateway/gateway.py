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

from callgate.gateway.config import GatewayConfig, PrincipalConfig
from callgate.gateway.pins import PinStore, new_pin
from callgate.gateway.schema import UnsupportedSchema
from callgate.gateway.tools import GatewayTool, ToolBuild, build_tool
from callgate.gateway.upstream import Upstream
from guard import (
    AmountLimit,
    ApprovalNotFound,
    Effect,
    Guard,
    Observer,
    Policy,
    Principal,
    RateLimit,
    Risk,
    RolePolicy,
    ToolResult,
    ToolSpec,
)
from guard.stores import ApprovalState, PendingAction, Stores

__all__ = ["Gateway", "GatewayError", "Stores"]

log = logging.getLogger("callgate.gateway")


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
    ) -> None:
        self.config = config
        self.stores = stores
        self.pins = pins
        self.observer = observer
        self.upstreams = [Upstream(u, on_tools=self._listed) for u in config.upstreams]
        self.entries: dict[str, GatewayTool] = {}
        self.guard: Guard | None = None
        self._started = False
        self._outstanding: dict[str, Outstanding] = {}
        self._resuming: dict[str, anyio.Event] = {}

    # -- life cycle -------------------------------------------------------------------------------

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Connect every upstream, pin or check each definition, build the guard; ``GatewayError`` if not."""
        for upstream in self.upstreams:
            try:
                await upstream.start(group)
            except ConnectionError as err:
                raise GatewayError(f"upstream {upstream.name!r}: {err}") from err
        problems = [p for u in self.upstreams for p in self._index(u, refuse=True)]
        if problems:
            raise GatewayError("refused at startup:\n  " + "\n  ".join(problems))
        self._check_allowlists()
        self._rebuild()
        self._started = True

    async def stop(self) -> None:
        for upstream in self.upstreams:
            await upstream.stop()

    async def watch_approvals(self, interval: float = 0.25) -> None:
        """Run decided approvals as soon as someone decides them (``callgate approvals approve``)."""
        while True:
            await anyio.sleep(interval)
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
        """``tools/list`` for ``principal``: the upstream's schema, annotations from the real policy."""
        tools = []
        for entry in self.allowed(principal):
            spec = entry.spec
            assert spec is not None
            tools.append(
                types.Tool(
                    name=entry.exposed,
                    title=entry.definition.get("title"),
                    description=spec.description,
                    input_schema=entry.definition.get("inputSchema") or {"type": "object"},
                    annotations=types.ToolAnnotations(
                        read_only_hint=spec.effect is Effect.READ,
                        destructive_hint=spec.effect is Effect.WRITE and spec.risk > Risk.LOW,
                        idempotent_hint=spec.effect is Effect.READ or spec.idempotent_backend,
                        open_world_hint=(entry.definition.get("annotations") or {}).get(
                            "openWorldHint"
                        ),
                    ),
                )
            )
        return tools

    # -- calls ------------------------------------------------------------------------------------

    async def call(
        self,
        principal: str,
        session_id: str,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
    ) -> ToolResult:
        """One ``tools/call`` through the whole pipeline. Never raises for anything the client sent."""
        if self._outstanding:
            await self.run_decided()
        for running in list(self._resuming.values()):
            # A re-proposal while its approved twin still runs would find no pending action and
            # ask again: let the approved call finish and record its result for the replay first.
            await running.wait()
        entry = self.entries.get(name)
        if entry is not None and entry.blocked:
            self._recheck_pin(entry)
        guard = self.guard
        assert guard is not None, "start() first"
        session = guard.session(session_id, self.principal(principal))
        result = await session.aexecute(name, dict(arguments or {}), call_id=call_id)
        if (
            result.approval_id is not None
            and not result.ok
            and result.approval_id not in self._outstanding
        ):
            action = guard.pending(result.approval_id)
            if action is not None and action.state is ApprovalState.PENDING:
                self._outstanding[action.id] = Outstanding(
                    approval_id=action.id, session_id=session_id, principal=principal
                )
        return result

    def adopt(self, actions: list[PendingAction]) -> int:
        """Watch pending actions an earlier gateway process left in the store; how many."""
        adopted = 0
        for action in actions:
            if action.state is ApprovalState.PENDING and action.tool in self.entries:
                self._outstanding[action.id] = Outstanding(
                    approval_id=action.id,
                    session_id=action.session_id,
                    principal=action.principal_id,
                )
                adopted += 1
        return adopted

    def pending(self, approval_id: str) -> PendingAction | None:
        return self.stores.approvals.get(approval_id)

    async def decide(self, approval_id: str, *, approve: bool, by: str) -> ToolResult:
        """A human decided through the client (elicitation): record it and run or end the call."""
        guard = self.guard
        assert guard is not None
        self._outstanding.pop(approval_id, None)
        if approve:
            return await guard.aapprove(approval_id, by=by)
        return guard.deny(approval_id, by=by)

    async def run_decided(self) -> list[ToolResult]:
        """Resume every watched approval that was decided (or expired) elsewhere."""
        guard = self.guard
        if guard is None:
            return []
        results = []
        now = time.time()
        for approval_id in list(self._outstanding):
            action = self.stores.approvals.get(approval_id)
            if action is None:
                self._outstanding.pop(approval_id, None)
                continue
            if action.state is ApprovalState.PENDING and action.expires_at >= now:
                continue
            if self._outstanding.pop(approval_id, None) is None:
                continue  # the watcher and a call raced: the other one resumes it
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
            pin = self.pins.add(new_pin(key, definition, by="gateway (first seen)"))
            current = new_pin(key, definition, by="").hash
            entry = GatewayTool(
                exposed=config.exposed(tool.name),
                upstream=upstream,
                upstream_name=tool.name,
                definition=definition,
                pin_key=key,
                current_hash=current,
                blocked=pin.hash != current,
            )
            if entry.blocked:
                log.warning("tool %s changed since it was pinned: blocked", entry.exposed)
            try:
                entry.spec, entry.limit = build_tool(entry, tool, config, self._build())
            except (UnsupportedSchema, ValueError) as err:
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
        """An operator may have re-pinned a blocked tool since: unblock it and rebuild."""
        pin = self.pins.get(entry.pin_key)
        if pin is not None and pin.hash == entry.current_hash:
            log.info("tool %s re-pinned: unblocked", entry.exposed)
            self._index(entry.upstream, refuse=False)
            self._rebuild()

    def _build(self) -> ToolBuild:
        return ToolBuild(counters=self.stores.counters, current=lambda name: self.entries.get(name))

    def _rebuild(self) -> None:
        specs: list[ToolSpec] = []
        limits: list[AmountLimit] = []
        for entry in self.entries.values():
            if entry.spec is None:
                continue
            specs.append(entry.spec)
            if entry.limit is not None and not entry.blocked:
                limits.append(entry.limit)
        self.guard = Guard(
            tools=specs,
            policy=self._policy(specs, limits),
            idempotency=self.stores.idempotency,
            approvals=self.stores.approvals,
            counters=self.stores.counters,
            observer=self.observer,
            shadow=self._shadow(specs),
        )

    def _shadow(self, specs: list[ToolSpec]) -> bool | frozenset[str]:
        shadow = self.config.policy.shadow
        if isinstance(shadow, bool):
            return shadow
        return frozenset(shadow) & {spec.name for spec in specs}

    def _policy(self, specs: list[ToolSpec], limits: list[AmountLimit]) -> Policy:
        policy = self.config.policy
        roles: dict[str, RolePolicy] = {}
        for principal in self.config.principals.values():
            names = self._names_for(principal)
            role = principal.role or principal.name
            tools = frozenset(n for n in names if n in self.entries) | (
                roles[role].tools if role in roles else frozenset()
            )
            roles[role] = RolePolicy(
                tools=tools, limits=tuple(limit for limit in limits if limit.tool in tools)
            )
        worst = max(
            (
                (s.timeout or 0) * s.retry.attempts + s.retry.max_delay * (s.retry.attempts - 1)
                for s in specs
                if s.is_write
            ),
            default=0.0,
        )
        return Policy(
            roles=roles,
            max_steps_per_session=policy.max_steps_per_session,
            max_steps_per_turn=policy.max_steps_per_session,
            rate_limit=(
                RateLimit(calls=policy.rate_limit.calls, seconds=policy.rate_limit.seconds)
                if policy.rate_limit is not None
                else None
            ),
            max_invalid_in_a_row=policy.max_invalid_in_a_row,
            max_identical_calls=policy.max_identical_calls,
            confirm_at=policy.confirm_at,
            confirmation_ttl=policy.confirmation_ttl,
            claim_lease=max(60.0, worst + 10.0),
            taint_requires_confirmation=policy.taint_requires_confirmation,
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
