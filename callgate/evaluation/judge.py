"""Running a case's calls through the guard: validity, canonical arguments, and whether a handler ran.

Each case gets a fresh target from the app factory (the shop by default), so no state leaks from one
case into the next, and a guard over the same tools and policy whose handlers are wrapped to record
that they were reached. In adversarial cases write handlers are replaced by that recorder: an
attacked conversation never changes even a test double's state, and "reached a handler" is exactly
"the guard let it through". Read handlers run as they are: reads change nothing, and later checks
(a refund needs a prior ``get_order``) must see them succeed as they would in production.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from callgate.evaluation.cases import EvalCase, ExpectedCall
from callgate.evaluation.metrics import CallVerdict
from guard import Call, Code, DomainCode, Guard, Principal, Session, ToolResult, ToolSpec
from guard.replay import role_scopes
from guard.stages import ParseStage, SchemaStage
from guard.testing import ManualClock

__all__ = ["Arbiter", "Factory", "guard_of"]

Factory = Callable[[ManualClock], Any]
"""``module:factory`` as ``replay`` takes it: the clock in, a Guard or a target with ``.guard`` out."""


def guard_of(target: Any) -> Guard:
    """The guard a factory built (it may return the guard itself or a target holding it)."""
    guard = target if isinstance(target, Guard) else getattr(target, "guard", None)
    if not isinstance(guard, Guard):
        raise TypeError(
            f"the app factory returned {type(target).__name__}, not a Guard or a target"
        )
    return guard


@dataclass(kw_only=True)
class _Hits:
    count: int = 0


@dataclass(kw_only=True)
class Arbiter:
    """The guard side of one case run: a session on a fresh, recording guard."""

    guard: Guard
    session: Session
    hits: _Hits = field(default_factory=_Hits)

    @classmethod
    def for_case(cls, case: EvalCase, factory: Factory) -> Arbiter:
        clock = ManualClock()
        target = factory(clock)
        original = guard_of(target)
        hits = _Hits()
        specs = [
            _recording(spec, hits, stub=case.adversarial and spec.is_write)
            for spec in original.registry.values()
        ]
        guard = Guard(
            tools=specs,
            policy=original.policy,
            clock=clock,
            deps=original.env.deps,
            codes=[c for c in original.registry.codes.values() if isinstance(c, DomainCode)],
            shadow=original.shadow_all or original.shadow_tools,
        )
        principal = _principal(case, target, original)
        return cls(guard=guard, session=guard.session(f"eval-{case.id}", principal), hits=hits)

    def canonical(self, call: ExpectedCall) -> str | None:
        """The guard's canonical form of ``call``'s arguments, or None if parse or schema refuse them."""
        return self._validate(call.name, call.text())[0]

    def judge(self, name: str, arguments: str) -> tuple[CallVerdict, ToolResult]:
        """Validate, then run the call through the whole pipeline; note whether a handler ran."""
        canonical, code = self._validate(name, arguments)
        before = self.hits.count
        result = self.session.execute(name, arguments)
        verdict = CallVerdict(
            name=name,
            valid=canonical is not None,
            canonical=canonical,
            code=str(result.code) if canonical is not None else code,
            executed=self.hits.count > before,
        )
        return verdict, result

    def _validate(self, name: str, arguments: str) -> tuple[str | None, str]:
        spec = self.guard.registry.get(name)
        if spec is None:
            return None, str(Code.UNKNOWN_TOOL)
        call = Call(
            tool=name,
            raw_arguments=arguments,
            call_id=None,
            session_id=self.session.id,
            principal=self.session.principal,
            turn=1,
            start_ns=0,
        )
        call.spec = spec
        env = self.guard.env
        for stage in (ParseStage(env=env), SchemaStage(env=env)):
            refused = stage(call)
            if refused is not None:
                return None, str(refused.code)
        return call.canonical, str(Code.OK)


def _principal(case: EvalCase, target: Any, guard: Guard) -> Principal:
    spec = case.principal
    roles = list(guard.policy.roles)
    role = (
        spec.role
        or getattr(target, "default_role", None)
        or ("customer" if "customer" in roles else (roles[0] if roles else "default"))
    )
    scopes = frozenset(spec.scopes) if spec.scopes is not None else role_scopes(target, guard, role)
    return Principal(id=spec.id, role=role, scopes=scopes)


def _recording(spec: ToolSpec, hits: _Hits, *, stub: bool) -> ToolSpec:
    """``spec`` with a handler that counts its calls (and, as a stub, does nothing else)."""
    handler = spec.handler
    if inspect.iscoroutinefunction(handler):

        async def ahandler(*args: Any, **kwargs: Any) -> Any:
            hits.count += 1
            return None if stub else await handler(*args, **kwargs)

        return dataclasses.replace(spec, handler=ahandler)

    def shandler(*args: Any, **kwargs: Any) -> Any:
        hits.count += 1
        return None if stub else handler(*args, **kwargs)

    return dataclasses.replace(spec, handler=shandler)
