"""The retail domain's own reason codes: declared once, listed by ``callgate codes``."""

from __future__ import annotations

from guard import DomainCode

__all__ = [
    "GIFT_CARD_BALANCE_LOW",
    "ITEM_UNAVAILABLE",
    "PAYMENT_METHOD_NOT_ALLOWED",
    "PAYMENT_METHOD_UNUSABLE",
    "RETAIL_CODES",
    "SAME_ITEM",
    "VARIANT_MISMATCH",
]

ITEM_UNAVAILABLE = DomainCode(
    "ITEM_UNAVAILABLE",
    stage="rules",
    fixable=True,
    phrase="A requested variant is out of stock.",
    advice="Offer the user an available variant of the same product (get_product_details lists them).",
)
VARIANT_MISMATCH = DomainCode(
    "VARIANT_MISMATCH",
    stage="rules",
    fixable=True,
    phrase="A new item is not a variant of the product it replaces.",
    advice="An exchange swaps variants of one product: pick the new item from that product's variants.",
)
GIFT_CARD_BALANCE_LOW = DomainCode(
    "GIFT_CARD_BALANCE_LOW",
    stage="rules",
    fixable=True,
    phrase="The gift card's balance does not cover the price difference.",
    advice="Ask the user for another payment method from their profile.",
)
PAYMENT_METHOD_UNUSABLE = DomainCode(
    "PAYMENT_METHOD_UNUSABLE",
    stage="rules",
    fixable=True,
    phrase="The payment method's account is closed.",
    advice="Ask the user for another payment method from their profile.",
)
PAYMENT_METHOD_NOT_ALLOWED = DomainCode(
    "PAYMENT_METHOD_NOT_ALLOWED",
    stage="rules",
    fixable=True,
    phrase="A refund goes to the original payment method or to a gift card.",
    advice="Use the order's payment method or one of the user's gift cards.",
)
SAME_ITEM = DomainCode(
    "SAME_ITEM",
    stage="rules",
    fixable=False,
    phrase="A new item is the same variant as the one it replaces.",
    advice="Confirm with the user that they want the very same variant again.",
)
"""A warning, not a refusal: the exchange goes ahead and the model is told."""

RETAIL_CODES = (
    ITEM_UNAVAILABLE,
    VARIANT_MISMATCH,
    GIFT_CARD_BALANCE_LOW,
    PAYMENT_METHOD_UNUSABLE,
    PAYMENT_METHOD_NOT_ALLOWED,
    SAME_ITEM,
)
"""Every code the retail tools add to callgate's core set."""
