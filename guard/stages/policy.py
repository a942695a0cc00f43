"""Stage 6: limits in code, risk by arguments, and capability separation after untrusted content."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel

from guard.call import Call, Reservation
from guard.codes import Code
from guard.policy import AmountLimit, TaintMode
from guard.provenance import ProvenanceHit
from guard.registry import Risk
from guard.result import ToolResult
from guard.stages.base import Env, counted, reject
from guard.stages.rules import check_context

__all__ = ["PolicyStage", "day_key", "sink_values", "taint_key"]

DAY = 86_400.0


def taint_key(session_id: str) -> str:
    """Set once a tool with untrusted output has run in the session."""
    return f"taint:{session_id}"


def day_key(principal_id: str, tool: str, field: str, group: object, day: int) -> str:
    """The running daily sum of ``field`` for one principal, tool and group (currency)."""
    return f"day:{principal_id}:{tool}:{field}:{group}:{day}"


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyStage:
    """Per-request caps refuse at once; daily caps are checked here and reserved atomically at execute."""

    env: Env
    name: str = "policy"

    def __call__(self, call: Call) -> ToolResult | None:
        spec, arguments, env = call.spec, call.arguments, self.env
        assert spec is not None and arguments is not None  # schema ran
        role = env.policy.role(call.principal.role)
        now = call.now
        for limit in role.limits if role else ():
            if limit.tool != spec.name:
                continue
            value = int(getattr(arguments, limit.field))
            if limit.per_request is not None and value > limit.per_request:
                return reject(
                    call,
                    Code.POLICY_LIMIT,
                    f"{limit.field} may be at most {limit.per_request} per request here. Do not "
                    "split it into smaller calls; offer the user a human agent.",
                )
            if limit.per_day is not None:
                group = _group(limit, arguments)
                key = day_key(call.principal.id, spec.name, limit.field, group, int(now // DAY))
                if counted(call, env.counters, key) + value > limit.per_day:
                    return reject(
                        call,
                        Code.POLICY_LIMIT,
                        f"The daily limit for {spec.name} would be exceeded. Do not retry today; "
                        "offer the user a human agent.",
                    )
                call.reservations += (Reservation(key=key, amount=value, limit=limit.per_day),)
            if limit.confirm_above is not None and value > limit.confirm_above:
                call.risk = Risk.HIGH  # risk by arguments: it waits for a human like a risky call
                self._ask(call, Code.CONFIRMATION_REQUIRED)
        if spec.risk_by is not None:
            call.risk = max(
                call.risk or Risk.LOW, spec.risk_by(arguments, check_context(call, env))
            )
        if (
            spec.gated_by_taint
            and call.approval is None
            and call.needs_human is None
            and env.policy.taint_requires_confirmation
            and counted(call, env.counters, taint_key(call.session_id)) > 0
        ):
            self._ask(call, self._taint_gate(call))
        return None

    def reads(self, call: Call) -> list[str]:
        """The daily sums and the taint mark this stage may read, for a store that batches to
        read ahead (``guard.batching``)."""
        spec, arguments, policy = call.spec, call.arguments, self.env.policy
        assert spec is not None and arguments is not None
        role, day = policy.role(call.principal.role), int(call.now // DAY)
        keys = [
            day_key(call.principal.id, spec.name, limit.field, _group(limit, arguments), day)
            for limit in (role.limits if role else ())
            if limit.tool == spec.name and limit.per_day is not None
        ]
        if spec.gated_by_taint and call.approval is None and policy.taint_requires_confirmation:
            keys.append(taint_key(call.session_id))
        return keys

    def _ask(self, call: Call, code: Code | None) -> None:
        if call.approval is None and call.needs_human is None:  # one reason, one approval
            call.needs_human = code

    def _taint_gate(self, call: Call) -> Code | None:
        """Session-wide: every gated call waits. Argument-level: the first sink argument whose
        value no trusted source vouches for (``VOUCHED``), or that came from untrusted output
        (``UNTRUSTED``) makes it wait; a tool that declares no sinks is gated session-wide."""
        spec, ledger, mode = call.spec, self.env.provenance, self.env.policy.taint_mode
        assert spec is not None and call.arguments is not None
        if mode is TaintMode.SESSION or ledger is None or not spec.declares_sinks:
            return Code.TAINTED_CONTEXT
        strict = mode is TaintMode.VOUCHED
        for where, value in sink_values(call.arguments, spec.sink_fields):
            found = ledger.lookup(call.session_id, value, now=call.now)
            if found.vouched or not (strict or found.only_untrusted):
                continue
            call.provenance = ProvenanceHit(field=where, value=found.value, source=found.untrusted)
            return Code.UNTRUSTED_VALUE
        return None


def _group(limit: AmountLimit, arguments: BaseModel) -> object:
    """What a daily limit sums apart (a currency): the argument it names, else one group."""
    return getattr(arguments, limit.group_by) if limit.group_by else "-"


def sink_values(arguments: BaseModel, fields: tuple[str, ...]) -> Iterator[tuple[str, object]]:
    """Each scalar a sink argument carries, with its place: ``to``, ``recipients/1``,
    ``payee/iban``. None carries nothing (an optional sink left out)."""
    for name in fields:
        yield from _scalars(name, getattr(arguments, name))


def _scalars(where: str, value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _scalars(f"{where}/{key}", item)
    elif isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            yield from _scalars(f"{where}/{index}", item)
    elif value is not None:
        yield where, value.value if isinstance(value, Enum) else value
