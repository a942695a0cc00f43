"""The retail tools: lookups that identify the user, reads of orders and products, three writes.

Every check and handler reaches the store through ``ctx.deps`` (a ``RetailDeps`` the host passes
to ``Guard(deps=...)``), never through a global.
"""

from __future__ import annotations

from typing import Any

from examples.retail.backend import Order, User
from examples.retail.codes import (
    GIFT_CARD_BALANCE_LOW,
    ITEM_UNAVAILABLE,
    PAYMENT_METHOD_NOT_ALLOWED,
    PAYMENT_METHOD_UNUSABLE,
    RETAIL_CODES,
    SAME_ITEM,
    VARIANT_MISMATCH,
)
from examples.retail.deps import RetailDeps
from examples.retail.models import (
    CancelPendingOrder,
    Change,
    ExchangeItems,
    FindUserByEmail,
    FindUserByNameZip,
    GetOrderDetails,
    GetProductDetails,
    GetUserDetails,
    OrderView,
    ProductView,
    ReturnItems,
    UserId,
    UserView,
)
from guard import (
    CheckContext,
    Code,
    Effect,
    Prerequisite,
    Principal,
    Problem,
    Risk,
    RuleViolation,
    SeenIn,
    ToolContext,
    ToolSpec,
    tool,
)

__all__ = ["CUSTOMER_SCOPES", "identified", "retail_tools"]

CUSTOMER_SCOPES = frozenset({"profile:read", "orders:read", "orders:write"})
"""What a session gets once the user is identified."""

FIND_USER = ("find_user_id_by_email", "find_user_id_by_name_zip")


def identified(data: Any, current: Principal) -> Principal | None:
    """The authenticator of both lookups: the user id the lookup found becomes the principal."""
    if not isinstance(data, dict) or not data.get("user_id"):
        return None
    return Principal(id=str(data["user_id"]), role="customer", scopes=CUSTOMER_SCOPES)


def _not_found(order_id: str) -> RuleViolation:
    # One answer for a missing and a foreign order, word for word: no enumeration oracle.
    return RuleViolation(
        Code.NOT_FOUND,
        f"No order {order_id} was found for this user. Ask the user to check the order id.",
    )


def _order(deps: RetailDeps, principal: Principal, order_id: str) -> Order:
    order = deps.backend.order(order_id)
    if order is None or order.user_id != principal.id:
        raise _not_found(order_id)
    return order


def check_order_owned(args: GetOrderDetails, ctx: CheckContext[RetailDeps]) -> None:
    """The order is the user's: checked before the handler, so a foreign one is never fetched."""
    _order(ctx.deps, ctx.principal, args.order_id)


def _delivered(order: Order, action: str) -> None:
    if order.status != "delivered":
        raise RuleViolation(
            Code.INVALID_STATE,
            f"Order {order.order_id} is {order.status}; only delivered orders can be {action}. "
            "Tell the user; do not retry.",
        )


def _usable(user: User, payment_method_id: str) -> None:
    method = user.payment_methods[payment_method_id]
    if method.closed:
        others = [m.id for m in user.payment_methods.values() if not m.closed]
        raise RuleViolation(
            PAYMENT_METHOD_UNUSABLE,
            f"The account of {payment_method_id} is closed. "
            + (
                f"Ask the user to pick another method: {', '.join(others)}."
                if others
                else "The user has no other payment method on file: tell them this cannot be "
                "done here and offer a human agent; do not retry."
            ),
            fixable=bool(others),  # another method fixes it; with none left nothing will
        )


def check_exchange(args: ExchangeItems, ctx: CheckContext[RetailDeps]) -> None:
    """Same product, in stock, paid by a usable method that covers the difference."""
    backend = ctx.deps.backend
    order = _order(ctx.deps, ctx.principal, args.order_id)
    _delivered(order, "exchanged")
    prices = {item.item_id: item for item in order.items}
    mismatched, unavailable, difference = [], [], 0
    for index, (old_id, new_id) in enumerate(zip(args.item_ids, args.new_item_ids, strict=True)):
        old = prices[old_id]
        found = backend.variant(new_id)
        if found is None or found[0].product_id != old.product_id:
            mismatched.append(
                Problem(
                    path=f"/new_item_ids/{index}",
                    rule="same_product",
                    expected=f"a variant of {old.product_id} (the product of {old_id})",
                    got=new_id,
                    hint="get_product_details lists the product's variants",
                )
            )
            continue
        product, variant = found
        if not variant.available:
            unavailable.append(
                Problem(
                    path=f"/new_item_ids/{index}",
                    rule="available",
                    expected=f"an available variant of {product.product_id}",
                    got=new_id,
                )
            )
        if new_id == old_id:
            ctx.warn(
                SAME_ITEM, f"{new_id} replaces itself: confirm the user wants the same variant."
            )
        difference += variant.price_cents - old.price_cents
    if mismatched:
        raise RuleViolation(VARIANT_MISMATCH, problems=mismatched)
    if unavailable:
        raise RuleViolation(ITEM_UNAVAILABLE, problems=unavailable)
    user = backend.user(ctx.principal.id)
    assert user is not None
    _usable(user, args.payment_method_id)
    method = user.payment_methods[args.payment_method_id]
    if method.balance_cents is not None and difference > method.balance_cents:
        raise RuleViolation(
            GIFT_CARD_BALANCE_LOW,
            f"The exchange costs {difference} cents more; {method.id} has {method.balance_cents}. "
            "Ask the user for another payment method from their profile.",
            data={"needed_cents": difference, "balance_cents": method.balance_cents},
        )


def check_return(args: ReturnItems, ctx: CheckContext[RetailDeps]) -> None:
    """Delivered, and the money goes back where it came from (or to a gift card)."""
    order = _order(ctx.deps, ctx.principal, args.order_id)
    _delivered(order, "returned")
    user = ctx.deps.backend.user(ctx.principal.id)
    assert user is not None
    method = user.payment_methods[args.payment_method_id]
    if method.id != order.payment_method_id and method.kind != "gift_card":
        raise RuleViolation(
            PAYMENT_METHOD_NOT_ALLOWED,
            f"Refunds of {order.order_id} go to {order.payment_method_id} (its payment method) "
            "or to a gift card. Ask the user which.",
        )
    _usable(user, args.payment_method_id)


def check_cancel(args: CancelPendingOrder, ctx: CheckContext[RetailDeps]) -> None:
    order = _order(ctx.deps, ctx.principal, args.order_id)
    if order.status != "pending":
        raise RuleViolation(
            Code.INVALID_STATE,
            f"Order {order.order_id} is {order.status}; only pending orders can be cancelled. "
            "Tell the user; do not retry.",
        )


def retail_tools() -> list[ToolSpec]:
    """The tools. They hold no backend: every call reaches it through ``ctx.deps``."""

    @tool(arguments=FindUserByEmail, result_model=UserId, authenticates=identified)
    def find_user_id_by_email(
        args: FindUserByEmail, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """Find the user by e-mail and identify them for this conversation. Use it first; if the
        user does not know their e-mail, use find_user_id_by_name_zip."""
        user = ctx.deps.backend.user_by_email(args.email)
        if user is None:
            raise RuleViolation(
                Code.NOT_FOUND,
                "No user has that e-mail. Ask the user to check it, or for name and zip.",
            )
        return {"user_id": user.user_id}

    @tool(arguments=FindUserByNameZip, result_model=UserId, authenticates=identified)
    def find_user_id_by_name_zip(
        args: FindUserByNameZip, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """Find the user by first name, last name and zip code, and identify them for this
        conversation. Use it when the user cannot give their e-mail."""
        user = ctx.deps.backend.user_by_name_zip(args.first_name, args.last_name, args.zip)
        if user is None:
            raise RuleViolation(
                Code.NOT_FOUND, "No user matches that name and zip. Ask the user to check them."
            )
        return {"user_id": user.user_id}

    @tool(
        arguments=GetUserDetails,
        scope="profile:read",
        result_model=UserView,
        prerequisite=Prerequisite(tool=FIND_USER),
    )
    def get_user_details(args: GetUserDetails, ctx: ToolContext[RetailDeps]) -> dict[str, Any]:
        """The identified user's profile: name, payment methods (gift cards with their balance)
        and order ids. Read-only."""
        user = ctx.deps.backend.user(ctx.principal.id)
        assert user is not None
        return {
            **vars(user),
            "payment_methods": [vars(m) for m in user.payment_methods.values()],
        }

    @tool(
        arguments=GetOrderDetails,
        scope="orders:read",
        result_model=OrderView,
        record_field="order_id",
        check=check_order_owned,
    )
    def get_order_details(args: GetOrderDetails, ctx: ToolContext[RetailDeps]) -> dict[str, Any]:
        """One order of the user: status, items (item id, product id, options, price) and its
        payment method. Use it before any exchange, return or cancellation. Read-only."""
        order = _order(ctx.deps, ctx.principal, args.order_id)
        return {**vars(order), "items": [vars(item) for item in order.items]}

    @tool(arguments=GetProductDetails, scope="orders:read", result_model=ProductView)
    def get_product_details(
        args: GetProductDetails, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """A product's variants: item id, options, price and availability. Use it to find the
        variant an item is exchanged for. Read-only."""
        product = ctx.deps.backend.product(args.product_id)
        if product is None:
            raise RuleViolation(
                Code.NOT_FOUND, f"No product {args.product_id}. Use an order item's product_id."
            )
        return {**vars(product), "variants": [vars(v) for v in product.variants.values()]}

    seen_payment = SeenIn(
        field="payment_method_id", tool="get_user_details", path="payment_methods.*.id"
    )
    seen_items = SeenIn(field="item_ids", tool="get_order_details", path="items.*.item_id")

    @tool(
        arguments=ExchangeItems,
        effect=Effect.WRITE,
        risk=Risk.MEDIUM,
        scope="orders:write",
        check=check_exchange,
        prerequisite=Prerequisite(tool="get_order_details", field="order_id"),
        requires=(
            seen_items,
            SeenIn(field="new_item_ids", tool="get_product_details", path="variants.*.item_id"),
            seen_payment,
        ),
        codes=RETAIL_CODES,
        result_model=Change,
        timeout=2.0,
    )
    def exchange_delivered_order_items(
        args: ExchangeItems, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """Exchange delivered items for other variants of the same product (another size or
        colour). The price difference is charged to, or refunded to, the payment method. Only
        after the user confirmed the items, the new variants and the payment method."""
        assert ctx.idempotency_key is not None
        return ctx.deps.backend.exchange(
            order_id=args.order_id,
            item_ids=list(args.item_ids),
            new_item_ids=list(args.new_item_ids),
            payment_method_id=args.payment_method_id,
            idempotency_key=ctx.idempotency_key,
        )

    @tool(
        arguments=ReturnItems,
        effect=Effect.WRITE,
        risk=Risk.HIGH,
        scope="orders:write",
        check=check_return,
        prerequisite=Prerequisite(tool="get_order_details", field="order_id"),
        requires=(seen_items, seen_payment),
        codes=RETAIL_CODES,
        result_model=Change,
        timeout=2.0,
    )
    def return_delivered_order_items(
        args: ReturnItems, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """Return delivered items for a refund to the order's payment method or a gift card.
        Needs a human's approval."""
        assert ctx.idempotency_key is not None
        return ctx.deps.backend.refund_items(
            order_id=args.order_id,
            item_ids=list(args.item_ids),
            payment_method_id=args.payment_method_id,
            idempotency_key=ctx.idempotency_key,
        )

    @tool(
        arguments=CancelPendingOrder,
        effect=Effect.WRITE,
        risk=Risk.MEDIUM,
        scope="orders:write",
        check=check_cancel,
        prerequisite=Prerequisite(tool="get_order_details", field="order_id"),
        result_model=Change,
        timeout=2.0,
    )
    def cancel_pending_order(
        args: CancelPendingOrder, ctx: ToolContext[RetailDeps]
    ) -> dict[str, Any]:
        """Cancel an order that has not shipped yet. Only when the user asks for it."""
        assert ctx.idempotency_key is not None
        return ctx.deps.backend.cancel(
            order_id=args.order_id, reason=args.reason, idempotency_key=ctx.idempotency_key
        )

    return [
        find_user_id_by_email,
        find_user_id_by_name_zip,
        get_user_details,
        get_order_details,
        get_product_details,
        exchange_delivered_order_items,
        return_delivered_order_items,
        cancel_pending_order,
    ]
