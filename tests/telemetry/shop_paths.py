"""Drive the shop through every code path the guard has, for the contract and canary tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from guard import Guard, Observer, Principal, ToolContext, ToolResult, tool
from guard.shop import ROLE_SCOPES, ShopBackend, shop_policy, shop_tools
from guard.testing import ManualClock

CANARY_CARD = "4242 4242 4242 4242"
CANARY_EMAIL = "canary.person@example.org"
CANARY_TOKEN = "Bearer eyJhbGciOiJIUzI1NiJ9.eyJjYW5hcnkiOjF9.c2lnbmF0dXJlY2FuYXJ5"
CANARY_PHONE = "+55 11 98765-4321"
CANARY_KEY = "sk-canaryKEY0123456789abcdef"
CANARIES = (
    CANARY_CARD,
    CANARY_CARD.replace(" ", ""),
    CANARY_EMAIL,
    "eyJjYW5hcnkiOjF9",
    "98765-4321",
    "canaryKEY0123456789",
)


class SaveCard(BaseModel):
    """Store a card for later refunds."""

    model_config = ConfigDict(extra="forbid")
    card_number: str = Field(json_schema_extra={"sensitive": True}, description="The card number.")
    note: str = Field(default="", max_length=500, description="Free text for the back office.")


class FetchPage(BaseModel):
    """Fetch a help page."""

    model_config = ConfigDict(extra="forbid")
    page: str = Field(max_length=40)


@tool(arguments=SaveCard, scope="orders:read")
def save_card(args: SaveCard, ctx: ToolContext) -> dict[str, Any]:
    """Save a card. Test-only tool with a schema-sensitive field."""
    return {"saved": True}


@tool(arguments=FetchPage, scope="policy:read", untrusted_output=True)
def fetch_page(args: FetchPage, ctx: ToolContext) -> dict[str, Any]:
    """Fetch a help page (outside text). Test-only tool whose result carries a key."""
    return {"text": f"Config example: api_key={CANARY_KEY}. Contact {CANARY_EMAIL}."}


def build_guard(observer: Observer, clock: ManualClock) -> tuple[Guard, ShopBackend]:
    """The shop plus two test tools, behind ``observer``."""
    backend = ShopBackend.with_orders()
    policy = shop_policy()
    roles = dict(policy.roles)
    extra = frozenset({"save_card", "fetch_page"})
    for name in ("customer", "viewer"):
        roles[name] = type(roles[name])(tools=roles[name].tools | extra, limits=roles[name].limits)
    guard = Guard(
        tools=[*shop_tools(backend, clock), save_card, fetch_page],
        policy=shop_policy(roles=roles),
        clock=clock,
        observer=observer,
    )
    return guard, backend


def drive(guard: Guard, backend: ShopBackend, clock: ManualClock) -> list[ToolResult]:
    """Every code path we can reach cheaply, with canaries in every sensitive place."""
    results: list[ToolResult] = []

    def session(
        sid: str, pid: str = "CUS-1", role: str = "customer", scopes: Any = None
    ) -> Callable[..., Any]:
        principal = Principal(
            id=pid, role=role, scopes=ROLE_SCOPES[role] if scopes is None else scopes
        )
        s = guard.session(sid, principal)

        def call(name: str, args: Any, call_id: str | None = None) -> ToolResult:
            result = s.execute(name, args, call_id=call_id or f"call_{len(results)}")
            results.append(result)
            return result

        call.session = s  # type: ignore[attr-defined]
        return call

    refund = {"order_id": "ORD-1001", "amount_cents": 2590, "currency": "BRL", "reason": "damaged"}
    a = session("s-main")
    a("get_order", {"order_id": "ORD-1001"})
    a("get_refund_status", {"order_id": "ORD-1001"})
    a("delete_everything", {})
    a("get_order", '{"order_id": "ORD-1001", call me ' + CANARY_PHONE)  # malformed JSON
    a("save_card", {"card_number": CANARY_CARD, "note": f"mail {CANARY_EMAIL}"})
    a("refund_order", {**refund, "reason": f"customer wrote {CANARY_EMAIL}"})  # e-mail in a reason
    a("refund_order", {**refund, "auth": CANARY_TOKEN})  # token in an extra field
    a("get_order", {"order_id": "ORD-1002"})  # foreign: NOT_FOUND
    a("refund_order", {**refund, "currency": "USD"})  # CURRENCY_MISMATCH
    a("refund_order", {**refund, "amount_cents": 12_001})  # AMOUNT_EXCEEDS_REFUNDABLE
    a("refund_order", {**refund, "amount_cents": 11_000})  # POLICY_LIMIT
    a.session.next_turn()  # type: ignore[attr-defined]
    a("get_order", {"order_id": "ORD-1004"})
    a(
        "refund_order",
        {"order_id": "ORD-1004", "amount_cents": 100, "currency": "USD", "reason": "damaged"},
    )
    pending = a("refund_order", refund)  # CONFIRMATION_REQUIRED
    assert pending.approval_id is not None
    results.append(guard.approve(pending.approval_id, by="staff-7"))  # runs, confirmed
    a("refund_order", refund)  # the same write again: replayed or pending again
    a.session.next_turn()  # type: ignore[attr-defined]
    denied = a("refund_order", {**refund, "amount_cents": 1000})
    if denied.approval_id:
        results.append(guard.deny(denied.approval_id, by="staff-7"))
    expiring = a("refund_order", {**refund, "amount_cents": 500})
    if expiring.approval_id:
        clock.advance(3600)
        results.append(guard.approve(expiring.approval_id, by="staff-7"))
    for _ in range(5):
        a("get_refund_status", {"order_id": "ORD-1001"})  # LOOP_DETECTED
    a.session.next_turn()  # type: ignore[attr-defined]
    backend.inject("lose_next_response", 1)
    a("get_order", {"order_id": "ORD-1003"})  # retried once, then OK
    backend.inject("transient", 3)
    a("get_refund_status", {"order_id": "ORD-1003"})  # UPSTREAM_UNAVAILABLE after retries

    b = session("s-prereq")
    b(
        "refund_order",
        {"order_id": "ORD-1003", "amount_cents": 100, "currency": "BRL", "reason": "damaged"},
    )
    b("search_refund_policy", {"query": "partial refunds"})  # untrusted, with an injection
    b("fetch_page", {"page": "config"})  # untrusted result carrying an API key
    b("get_order", {"order_id": "ORD-1003"})
    b(
        "refund_order",
        {"order_id": "ORD-1003", "amount_cents": 100, "currency": "BRL", "reason": "damaged"},
    )

    c = session("s-viewer", role="viewer")
    c("refund_order", refund)  # TOOL_NOT_ALLOWED
    d = session("s-noscope", scopes=frozenset())
    d("get_order", {"order_id": "ORD-1001"})  # PERMISSION_DENIED

    e = session("s-invalid")
    for _ in range(5):
        e("get_order", {"order_id": "nope"})  # INVALID_ARGUMENTS, then the validation budget
    f = session("s-busy")
    for index in range(60):
        if index % 10 == 9:
            f.session.next_turn()  # type: ignore[attr-defined]
        f("get_order", {"order_id": f"ORD-{1001 + index % 3}"})  # RATE_LIMITED, STEP_LIMIT
    return results
