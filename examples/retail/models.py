"""The retail tools' argument models (strict, closed) and result models (what the model may see)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CancelPendingOrder",
    "ExchangeItems",
    "FindUserByEmail",
    "FindUserByNameZip",
    "GetOrderDetails",
    "GetProductDetails",
    "GetUserDetails",
    "ReturnItems",
]

ORDER_ID = Field(
    pattern=r"^#W[0-9]{4}$", description="The order id with its leading '#', e.g. #W2001."
)
ITEM_IDS = Field(
    min_length=1,
    max_length=5,
    description="Item ids exactly as get_order_details listed them, e.g. KB-RED-FULL.",
)
PAYMENT_METHOD_ID = Field(
    pattern=r"^(credit_card|paypal|gift_card)_[0-9]+$",
    description="A payment method id from get_user_details, e.g. gift_card_5412.",
)


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FindUserByEmail(_Arguments):
    email: str = Field(
        pattern=r"^[^@ \t\n\r\f\v]+@[^@ \t\n\r\f\v]+\.[a-z]+$",
        description="The user's e-mail address.",
    )


class FindUserByNameZip(_Arguments):
    first_name: str = Field(min_length=1, max_length=50)
    last_name: str = Field(min_length=1, max_length=50)
    zip: str = Field(pattern=r"^[0-9]{5}$", description="Five-digit US zip code, e.g. 94110.")


class GetUserDetails(_Arguments):
    """No arguments: the identified user's own profile."""


class GetOrderDetails(_Arguments):
    order_id: str = ORDER_ID


class GetProductDetails(_Arguments):
    product_id: str = Field(
        pattern=r"^P-[A-Z]+$", description="The product id from an order item, e.g. P-KEYBOARD."
    )


class ExchangeItems(_Arguments):
    order_id: str = ORDER_ID
    item_ids: list[str] = ITEM_IDS
    new_item_ids: list[str] = Field(
        min_length=1,
        max_length=5,
        description="For each item, the variant it becomes, from get_product_details.",
    )
    payment_method_id: str = PAYMENT_METHOD_ID

    @model_validator(mode="after")
    def one_new_item_per_item(self) -> ExchangeItems:
        """new_item_ids has one entry per entry of item_ids, in the same order, and item_ids has no repeats."""
        if len(self.new_item_ids) != len(self.item_ids):
            raise ValueError(
                f"new_item_ids needs one entry per entry of item_ids: {len(self.item_ids)} "
                f"item(s), {len(self.new_item_ids)} replacement(s)"
            )
        if len(set(self.item_ids)) != len(self.item_ids):
            raise ValueError("item_ids lists an item twice: name each item once")
        return self


class ReturnItems(_Arguments):
    order_id: str = ORDER_ID
    item_ids: list[str] = ITEM_IDS
    payment_method_id: str = PAYMENT_METHOD_ID


class CancelPendingOrder(_Arguments):
    order_id: str = ORDER_ID
    reason: Literal["no longer needed", "ordered by mistake"] = Field(
        description="The user's reason, one of the two listed."
    )


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore")


class UserId(_View):
    user_id: str


class PaymentMethodView(_View):
    id: str
    kind: str
    balance_cents: int | None = None


class UserView(_View):
    user_id: str
    first_name: str
    last_name: str
    payment_methods: list[PaymentMethodView]
    orders: list[str]


class ItemView(_View):
    item_id: str
    product_id: str
    name: str
    options: dict[str, str]
    price_cents: int


class OrderView(_View):
    order_id: str
    status: str
    items: list[ItemView]
    payment_method_id: str


class VariantView(_View):
    item_id: str
    options: dict[str, str]
    price_cents: int
    available: bool


class ProductView(_View):
    product_id: str
    name: str
    variants: list[VariantView]


class Change(_View):
    order_id: str
    status: str
    price_difference_cents: int | None = None
    refund_cents: int | None = None
