"""The retail store's backend: users, orders of several items, products with variants, payments.

A plain in-memory fake, real enough to count side effects (``side_effects``): each exchange,
return or cancellation applied adds one; a repeated idempotency key returns the first answer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["Item", "Order", "PaymentMethod", "Product", "RetailBackend", "User", "default_backend"]


@dataclass(kw_only=True)
class PaymentMethod:
    id: str
    """``credit_card_1``, ``paypal_2``, ``gift_card_3``."""
    kind: str
    """``credit_card``, ``paypal`` or ``gift_card``."""
    balance_cents: int | None = None
    """Gift cards only: what is left on the card."""
    closed: bool = False
    """A closed account: the processor refuses every charge and refund."""


@dataclass(kw_only=True)
class User:
    user_id: str
    first_name: str
    last_name: str
    zip: str
    email: str
    payment_methods: dict[str, PaymentMethod]
    orders: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Variant:
    item_id: str
    options: dict[str, str]
    price_cents: int
    available: bool = True


@dataclass(kw_only=True)
class Product:
    product_id: str
    name: str
    variants: dict[str, Variant]


@dataclass(kw_only=True)
class Item:
    item_id: str
    product_id: str
    name: str
    options: dict[str, str]
    price_cents: int


@dataclass(kw_only=True)
class Order:
    order_id: str
    user_id: str
    status: str
    """``pending``, ``delivered``, ``exchange requested``, ``return requested`` or ``cancelled``."""
    items: list[Item]
    payment_method_id: str


@dataclass
class RetailBackend:
    """The store's systems behind one lock. ``side_effects`` counts writes applied."""

    users: dict[str, User] = field(default_factory=dict)
    orders: dict[str, Order] = field(default_factory=dict)
    products: dict[str, Product] = field(default_factory=dict)
    side_effects: int = 0
    _done: dict[str, dict[str, object]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- reads ------------------------------------------------------------------------------------

    def user_by_email(self, email: str) -> User | None:
        with self._lock:
            return next((u for u in self.users.values() if u.email == email.lower()), None)

    def user_by_name_zip(self, first: str, last: str, zip_code: str) -> User | None:
        with self._lock:
            key = (first.lower(), last.lower(), zip_code)
            return next(
                (
                    u
                    for u in self.users.values()
                    if (u.first_name.lower(), u.last_name.lower(), u.zip) == key
                ),
                None,
            )

    def user(self, user_id: str) -> User | None:
        with self._lock:
            return self.users.get(user_id)

    def order(self, order_id: str) -> Order | None:
        with self._lock:
            return self.orders.get(order_id)

    def product(self, product_id: str) -> Product | None:
        with self._lock:
            return self.products.get(product_id)

    def variant(self, item_id: str) -> tuple[Product, Variant] | None:
        with self._lock:
            for product in self.products.values():
                if item_id in product.variants:
                    return product, product.variants[item_id]
        return None

    # -- writes -----------------------------------------------------------------------------------

    def exchange(
        self,
        *,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
        idempotency_key: str,
    ) -> dict[str, object]:
        """Swap items for other variants; the price difference goes to (or comes from) the method."""
        with self._lock:
            if (done := self._done.get(idempotency_key)) is not None:
                return done
            order = self.orders[order_id]
            old = sum(i.price_cents for i in order.items if i.item_id in item_ids)
            new = 0
            for item_id in new_item_ids:
                product = next(p for p in self.products.values() if item_id in p.variants)
                new += product.variants[item_id].price_cents
            method = self.users[order.user_id].payment_methods[payment_method_id]
            if method.balance_cents is not None:
                method.balance_cents -= new - old
            order.status = "exchange requested"
            self.side_effects += 1
            done = {
                "order_id": order_id,
                "status": order.status,
                "price_difference_cents": new - old,
            }
            self._done[idempotency_key] = done
            return done

    def refund_items(
        self, *, order_id: str, item_ids: list[str], payment_method_id: str, idempotency_key: str
    ) -> dict[str, object]:
        """Return items: their price goes back to the payment method."""
        with self._lock:
            if (done := self._done.get(idempotency_key)) is not None:
                return done
            order = self.orders[order_id]
            amount = sum(i.price_cents for i in order.items if i.item_id in item_ids)
            method = self.users[order.user_id].payment_methods[payment_method_id]
            if method.balance_cents is not None:
                method.balance_cents += amount
            order.status = "return requested"
            self.side_effects += 1
            done = {"order_id": order_id, "status": order.status, "refund_cents": amount}
            self._done[idempotency_key] = done
            return done

    def cancel(self, *, order_id: str, reason: str, idempotency_key: str) -> dict[str, object]:
        with self._lock:
            if (done := self._done.get(idempotency_key)) is not None:
                return done
            order = self.orders[order_id]
            order.status = "cancelled"
            self.side_effects += 1
            done = {"order_id": order_id, "status": order.status, "reason": reason}
            self._done[idempotency_key] = done
            return done


def default_backend() -> RetailBackend:
    """Two users, a keyboard and a t-shirt in several variants, three orders."""
    keyboard = Product(
        product_id="P-KEYBOARD",
        name="Mechanical keyboard",
        variants={
            "KB-RED-FULL": Variant(
                item_id="KB-RED-FULL", options={"switch": "red", "size": "full"}, price_cents=12_000
            ),
            "KB-BLUE-FULL": Variant(
                item_id="KB-BLUE-FULL",
                options={"switch": "blue", "size": "full"},
                price_cents=12_500,
            ),
            "KB-BROWN-TKL": Variant(
                item_id="KB-BROWN-TKL",
                options={"switch": "brown", "size": "tkl"},
                price_cents=11_000,
                available=False,
            ),
        },
    )
    shirt = Product(
        product_id="P-SHIRT",
        name="T-shirt",
        variants={
            "TS-BLACK-M": Variant(
                item_id="TS-BLACK-M", options={"color": "black", "size": "M"}, price_cents=2_500
            ),
            "TS-BLACK-L": Variant(
                item_id="TS-BLACK-L", options={"color": "black", "size": "L"}, price_cents=2_500
            ),
            "TS-WHITE-M": Variant(
                item_id="TS-WHITE-M", options={"color": "white", "size": "M"}, price_cents=2_500
            ),
        },
    )

    def item(product: Product, item_id: str) -> Item:
        variant = product.variants[item_id]
        return Item(
            item_id=item_id,
            product_id=product.product_id,
            name=product.name,
            options=dict(variant.options),
            price_cents=variant.price_cents,
        )

    users = {
        "mia_li_3668": User(
            user_id="mia_li_3668",
            first_name="Mia",
            last_name="Li",
            zip="94110",
            email="mia.li@example.com",
            payment_methods={
                "credit_card_9231": PaymentMethod(id="credit_card_9231", kind="credit_card"),
                "gift_card_5412": PaymentMethod(
                    id="gift_card_5412", kind="gift_card", balance_cents=300
                ),
            },
            orders=["#W2001", "#W2002"],
        ),
        "omar_ali_1077": User(
            user_id="omar_ali_1077",
            first_name="Omar",
            last_name="Ali",
            zip="10027",
            email="omar.ali@example.com",
            payment_methods={
                "paypal_5100": PaymentMethod(id="paypal_5100", kind="paypal", closed=True),
            },
            orders=["#W3001"],
        ),
    }
    orders = {
        "#W2001": Order(
            order_id="#W2001",
            user_id="mia_li_3668",
            status="delivered",
            items=[item(keyboard, "KB-RED-FULL"), item(shirt, "TS-BLACK-M")],
            payment_method_id="credit_card_9231",
        ),
        "#W2002": Order(
            order_id="#W2002",
            user_id="mia_li_3668",
            status="pending",
            items=[item(shirt, "TS-WHITE-M")],
            payment_method_id="gift_card_5412",
        ),
        "#W3001": Order(
            order_id="#W3001",
            user_id="omar_ali_1077",
            status="delivered",
            items=[item(shirt, "TS-BLACK-L")],
            payment_method_id="paypal_5100",
        ),
    }
    return RetailBackend(
        users=users, orders=orders, products={p.product_id: p for p in (keyboard, shirt)}
    )
