"""The reference domain: a small shop's orders and refunds, shipped for tests, demos and examples."""

from guard.shop.app import ROLE_SCOPES, ShopApp, build_shop, shop_policy
from guard.shop.backend import POLICY_PAGES, Order, Refund, ShopBackend, default_orders
from guard.shop.codes import AMOUNT_EXCEEDS_REFUNDABLE, CURRENCY_MISMATCH, SHOP_CODES
from guard.shop.models import GetOrder, GetRefundStatus, RefundOrder, SearchRefundPolicy
from guard.shop.tools import shop_tools

__all__ = [
    "AMOUNT_EXCEEDS_REFUNDABLE",
    "CURRENCY_MISMATCH",
    "POLICY_PAGES",
    "ROLE_SCOPES",
    "SHOP_CODES",
    "GetOrder",
    "GetRefundStatus",
    "Order",
    "Refund",
    "RefundOrder",
    "SearchRefundPolicy",
    "ShopApp",
    "ShopBackend",
    "build_shop",
    "default_orders",
    "shop_policy",
    "shop_tools",
]
