"""The retail domain, assembled: a policy, the dependencies and a guard, as the docs and tests use it."""

from __future__ import annotations

from dataclasses import dataclass

from examples.retail.backend import RetailBackend, default_backend
from examples.retail.codes import RETAIL_CODES
from examples.retail.deps import RetailDeps
from examples.retail.tools import FIND_USER, retail_tools
from guard import Clock, Guard, Observer, Policy, Principal, RolePolicy, Session

__all__ = ["RetailApp", "build_retail", "replay_target", "retail_policy"]


def retail_policy(**overrides: object) -> Policy:
    """Before the user is identified the agent may only look them up; after, it may do everything."""
    tools = frozenset(spec.name for spec in retail_tools())
    roles = {
        "anonymous": RolePolicy(tools=frozenset(FIND_USER)),
        "customer": RolePolicy(tools=tools),
    }
    settings: dict[str, object] = {"roles": roles, "max_steps_per_turn": 30}
    settings.update(overrides)
    return Policy(**settings)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class RetailApp:
    """A guard over the store, and the store itself (to count side effects)."""

    guard: Guard
    backend: RetailBackend

    def session(self, session_id: str) -> Session:
        """A support chat: it starts anonymous and learns who the user is from a lookup."""
        return self.guard.session(session_id, Principal.anonymous())


def build_retail(
    *,
    clock: Clock | None = None,
    observer: Observer | None = None,
    backend: RetailBackend | None = None,
    policy: Policy | None = None,
    shadow: bool | frozenset[str] = False,
) -> RetailApp:
    """The second reference domain, ready to call. ``shadow=True`` (or a set of tool names) watches
    what the gate would decide without enforcing it."""
    backend = backend if backend is not None else default_backend()
    guard = Guard(
        tools=retail_tools(),
        policy=policy if policy is not None else retail_policy(),
        clock=clock,
        observer=observer,
        deps=RetailDeps(backend=backend),
        codes=RETAIL_CODES,
        shadow=shadow,
    )
    return RetailApp(guard=guard, backend=backend)


def replay_target(clock: Clock) -> RetailApp:
    """For ``callgate replay --app`` and ``callgate codes --app examples.retail:replay_target``."""
    return build_retail(clock=clock)
