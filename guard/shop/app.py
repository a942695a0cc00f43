"""The shop, assembled: backend, tools, policy and a guard, as the tests, the demo and `replay` use it."""

from __future__ import annotations

from dataclasses import dataclass

from guard.clock import Clock, SystemClock
from guard.observe import Observer
from guard.pipeline import Guard, Session
from guard.policy import AmountLimit, Policy, RateLimit, RolePolicy
from guard.session import Principal
from guard.shop.backend import Order, ShopBackend
from guard.shop.tools import shop_tools
from guard.stores.base import ApprovalStore, CounterStore, IdempotencyStore

__all__ = ["ROLE_SCOPES", "ShopApp", "build_shop", "shop_policy"]

READS = frozenset({"get_order", "get_refund_status", "search_refund_policy"})

ROLE_SCOPES: dict[str, frozenset[str]] = {
    "customer": frozenset({"orders:read", "policy:read", "refunds:write"}),
    "support_agent": frozenset({"orders:read", "policy:read", "refunds:write"}),
    "viewer": frozenset({"orders:read", "policy:read"}),
}
"""The scopes a session of each role gets by default."""


def shop_policy(**overrides: object) -> Policy:
    """An end-user support bot gets reads and a capped refund; an internal agent more; a viewer reads."""
    roles = {
        "customer": RolePolicy(
            tools=READS | {"refund_order"},
            limits=(AmountLimit(tool="refund_order", per_request=10_000, per_day=15_000),),
        ),
        "support_agent": RolePolicy(
            tools=READS | {"refund_order"},
            limits=(AmountLimit(tool="refund_order", per_request=100_000, per_day=500_000),),
        ),
        "viewer": RolePolicy(tools=READS),
    }
    settings: dict[str, object] = {"roles": roles, "rate_limit": RateLimit(calls=20, seconds=1.0)}
    settings.update(overrides)
    return Policy(**settings)  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class ShopApp:
    """A guard over the shop's backend, with shortcuts for sessions."""

    guard: Guard
    backend: ShopBackend

    def session(self, session_id: str, principal_id: str, role: str = "customer") -> Session:
        principal = Principal(id=principal_id, role=role, scopes=ROLE_SCOPES.get(role, frozenset()))
        return self.guard.session(session_id, principal)


def build_shop(
    *,
    orders: list[Order] | None = None,
    policy: Policy | None = None,
    idempotency: IdempotencyStore | None = None,
    approvals: ApprovalStore | None = None,
    counters: CounterStore | None = None,
    clock: Clock | None = None,
    observer: Observer | None = None,
    backend: ShopBackend | None = None,
) -> ShopApp:
    """The reference domain, ready to call. Every port can be swapped (durable stores, a fake clock)."""
    clock = clock if clock is not None else SystemClock()
    backend = backend if backend is not None else ShopBackend.with_orders(orders)
    guard = Guard(
        tools=shop_tools(backend, clock),
        policy=policy if policy is not None else shop_policy(),
        idempotency=idempotency,
        approvals=approvals,
        counters=counters,
        clock=clock,
        observer=observer,
    )
    return ShopApp(guard=guard, backend=backend)
