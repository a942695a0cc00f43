"""The shop's tool contracts: argument models (strict, closed) and result models (only what the model needs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "GetOrder",
    "GetRefundStatus",
    "OrderView",
    "PolicyHit",
    "PolicyResults",
    "RefundOrder",
    "RefundStatus",
    "RefundView",
    "SearchRefundPolicy",
]

ORDER_ID = Field(
    pattern=r"^ORD-[0-9]{4}$",
    description="The order id exactly as the user or a previous tool result gave it, e.g. ORD-1001.",
)


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GetOrder(_Arguments):
    """Look up one order of the current customer."""

    order_id: str = ORDER_ID


class GetRefundStatus(_Arguments):
    """See the refunds already made for an order."""

    order_id: str = ORDER_ID


class SearchRefundPolicy(_Arguments):
    """Search the refund policy pages."""

    query: str = Field(
        min_length=3, max_length=200, description="A few words to search for, e.g. 'damaged item'."
    )


class RefundOrder(_Arguments):
    """Refund part or all of an order."""

    order_id: str = ORDER_ID
    amount_cents: int = Field(
        gt=0,
        description="Amount in integer minor units (cents): 25.90 is 2590. Never a decimal or a string.",
    )
    currency: Literal["BRL", "USD"] = Field(
        description="ISO currency of the order's payment, as get_order reports it."
    )
    reason: Literal["damaged", "not_delivered", "customer_request"] = Field(
        description="Why the customer asks: damaged, not_delivered or customer_request."
    )


class _View(BaseModel):
    # Result models ignore what they do not declare: a handler's extra fields never reach the model.
    model_config = ConfigDict(extra="ignore")


class OrderView(_View):
    order_id: str
    status: str
    amount_cents: int
    currency: str
    refunded_cents: int
    refundable_cents: int
    as_of: str


class RefundView(_View):
    refund_id: str
    order_id: str
    amount_cents: int
    currency: str
    status: str


class RefundStatus(_View):
    order_id: str
    refunded_cents: int
    refunds: list[RefundView]
    as_of: str


class PolicyHit(_View):
    title: str
    text: str


class PolicyResults(_View):
    results: list[PolicyHit]
