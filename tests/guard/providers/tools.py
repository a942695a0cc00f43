"""Tool specs the provider tests render: a read, a write, and two that have no strict form."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from guard.registry import Effect, Risk, ToolContext, ToolSpec

__all__ = [
    "GET_ORDER",
    "OPEN_METADATA",
    "RECURSIVE",
    "REFUND_ORDER",
    "TITLED",
    "VALID_REFUND",
]


class GetOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-[0-9]{4}$", description="The order id, like ORD-1001.")


class Contact(BaseModel):
    """Who to tell about the refund."""

    model_config = ConfigDict(extra="forbid")

    channel: Literal["email", "sms"]
    address: str = Field(max_length=120, description="Where to send the notice.")


class RefundOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order_id: str = Field(pattern=r"^ORD-[0-9]{4}$", description="The order id, like ORD-1001.")
    amount_cents: int = Field(gt=0, description="Integer cents; 25.90 is 2590.")
    currency: Literal["BRL", "USD"]
    note: str | None = Field(default=None, description="Optional note for the ledger.")
    contact: Contact = Field(description="Who to notify.")


class WithMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, str]


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str
    children: list[Node] = []


class Titled(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(description="A field that happens to be called title.")
    limit: int = Field(default=10, ge=1, le=50)


def _handler(args: Any, ctx: ToolContext) -> dict[str, Any]:
    return {}


GET_ORDER = ToolSpec(
    name="get_order",
    description="Look up one order. Use before any refund.",
    arguments=GetOrder,
    handler=_handler,
    scope="orders:read",
)
REFUND_ORDER = ToolSpec(
    name="refund_order",
    description="Refund part or all of an order. Only when the user asked for a refund.",
    arguments=RefundOrder,
    handler=_handler,
    effect=Effect.WRITE,
    risk=Risk.HIGH,
    scope="refunds:write",
)
OPEN_METADATA = ToolSpec(
    name="tag_order", description="Tag an order.", arguments=WithMetadata, handler=_handler
)
RECURSIVE = ToolSpec(
    name="make_tree", description="Build a tree.", arguments=Node, handler=_handler
)
TITLED = ToolSpec(
    name="titled", description="Has a title field.", arguments=Titled, handler=_handler
)

VALID_REFUND: dict[str, Any] = {
    "order_id": "ORD-1001",
    "amount_cents": 2590,
    "currency": "BRL",
    "note": None,
    "contact": {"channel": "email", "address": "ana@example.com"},
}
"""Valid under the strict schema (every key present) and for the argument model."""
