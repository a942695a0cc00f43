"""What the guard costs per call, against a naive loop measured in the same run.

The naive loop is what an agent framework does without a guard: ``json.loads``, a dict lookup, a
call of the same handler the guard calls (with the same backend). The guard runs the full pipeline
with the null observer and in-memory stores, so the difference is the guard's own work: validation,
keys, counters, result filtering, bookkeeping. Run: ``.venv/bin/python bench/guard_overhead.py``.

The ``get_profile`` rows are a read whose result is a multi-kilobyte record (a profile with its
orders, filtered through a result model): they show what result handling costs as results grow.
The last line compares the guarded 4 KB read with the guarded shop read (goal: at most 1.5x).

The ``retail`` rows are the retail support domain (``examples/retail``) on a store whose user,
order and product records are several kilobytes each. Their baseline is not a bare handler call
but the same rules written as plain Python on the same calls: the arguments' patterns and closed
objects, the role's tools and scope, the step and identical-call counters, the prerequisites and
the ownership check, the result filtered to the view's fields, the values later calls must have
seen kept in a set. Goal: the gate within 3x of that.
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# The retail example is not an installed package: run as a script, only bench/ is on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import BaseModel, ConfigDict, Field

from examples.retail import build_retail, retail_policy
from examples.retail.backend import (
    Item,
    PaymentMethod,
    RetailBackend,
    Variant,
    default_backend,
)
from guard import Guard, Policy, Principal, RolePolicy, ToolContext, tool
from guard.shop import Order, build_shop

ROLE = "bench"
PRINCIPAL = Principal(id="CUS-1", role=ROLE, scopes=frozenset({"orders:read", "refunds:write"}))


class GetProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    user_id: str = Field(pattern=r"^USR-[0-9]{4}$", description="The user id, e.g. USR-0001.")


class OrderLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    order_id: str
    sku: str
    quantity: int
    price_cents: int
    status: str
    note: str


class Profile(BaseModel):
    model_config = ConfigDict(extra="ignore")
    user_id: str
    name: str
    email: str
    tier: str
    orders: list[OrderLine]


def profile(size: int) -> dict[str, Any]:
    """A profile record whose JSON is about ``size`` bytes (plus a field the view drops)."""
    orders: list[dict[str, Any]] = []
    record = {
        "user_id": "USR-0001",
        "name": "Ana Souza",
        "email": "ana@example.com",
        "tier": "gold",
        "orders": orders,
        "internal_score": 0.93,
    }
    while len(json.dumps(record)) < size:
        i = len(orders)
        orders.append(
            {
                "order_id": f"ORD-{i:04d}",
                "sku": f"SKU-{i:06d}",
                "quantity": i % 5 + 1,
                "price_cents": 1000 + i,
                "status": "delivered",
                "note": "left at the door, signed for by a neighbour",
                "warehouse": "GRU-2",
            }
        )
    return record


def profile_rows(
    n: int, context: ToolContext
) -> list[tuple[str, Callable[[int], Any], Callable[[int], Any]]]:
    """Naive and guarded runs of a read returning 1 KB, 4 KB and 32 KB records."""
    rows: list[tuple[str, Callable[[int], Any], Callable[[int], Any]]] = []
    for size in (1024, 4096, 32768):
        record = profile(size)

        @tool(arguments=GetProfile, result_model=Profile, name="get_profile")
        def get_profile(
            args: Any, ctx: ToolContext, record: dict[str, Any] = record
        ) -> dict[str, Any]:
            """Look up a user's profile with their orders."""
            return record

        policy = Policy(
            roles={ROLE: RolePolicy(tools=frozenset({"get_profile"}))},
            rate_limit=None,
            max_steps_per_session=10**9,
            max_steps_per_turn=10**9,
            max_identical_calls=10**9,
        )
        session = Guard(tools=[get_profile], policy=policy).session("bench-profile", PRINCIPAL)
        handler = get_profile.handler

        def naive(_: int, handler: Any = handler) -> Any:
            args = json.loads('{"user_id": "USR-0001"}')
            return handler(SimpleNamespace(**args), context)

        def guarded(_: int, session: Any = session) -> Any:
            return session.execute("get_profile", '{"user_id": "USR-0001"}', call_id="c")

        assert guarded(0).ok
        rows.append((f"get_profile ({size // 1024} KB result)", naive, guarded))
    return rows


def big_retail() -> RetailBackend:
    """The retail store with multi-kilobyte records: Mia's profile lists 60 orders and 8 payment
    methods (about 2 KB), her order #W2001 holds 14 items (about 3 KB), the keyboard has 30
    variants (about 4 KB)."""
    backend = default_backend()
    keyboard = backend.products["P-KEYBOARD"]
    for i in range(27):
        options = {"switch": f"switch-{i}", "size": "full", "layout": "ansi", "caps": "pbt"}
        item_id = f"KB-X{i:02d}-FULL"
        keyboard.variants[item_id] = Variant(
            item_id=item_id, options=options, price_cents=12_000 + i
        )
    mia = backend.users["mia_li_3668"]
    for i in range(6):
        method = f"gift_card_{7000 + i}"
        mia.payment_methods[method] = PaymentMethod(id=method, kind="gift_card", balance_cents=i)
    mia.orders += [f"#W{5000 + i}" for i in range(57)]
    order = backend.orders["#W2001"]
    for variant in list(keyboard.variants.values())[3:15]:
        order.items.append(
            Item(
                item_id=variant.item_id,
                product_id=keyboard.product_id,
                name=keyboard.name,
                options=dict(variant.options),
                price_cents=variant.price_cents,
            )
        )
    return backend


RETAIL_CALLS = {
    "get_user_details": "{}",
    "get_order_details": '{"order_id": "#W2001"}',
    "get_product_details": '{"product_id": "P-KEYBOARD"}',
}
ORDER_ID = re.compile(r"^#W[0-9]{4}$")
PRODUCT_ID = re.compile(r"^P-[A-Z]+$")


class PlainRetail:
    """The retail rules as a host would write them by hand, with the state in dicts and sets."""

    def __init__(self, backend: RetailBackend, principal: Principal) -> None:
        self.backend, self.principal = backend, principal
        self.tools = {
            spec.name: spec for spec in build_retail(backend=backend).guard.registry.values()
        }
        self.allowed = frozenset(retail_policy().roles["customer"].tools)
        self.scopes = {name: spec.scope for name, spec in self.tools.items()}
        self.steps = 0
        self.identical: dict[tuple[str, str], int] = {}
        self.ran = {"find_user_id_by_name_zip"}
        self.records: set[tuple[str, str]] = set()
        self.seen: set[tuple[str, str, str]] = set()
        self.context = ToolContext(
            principal=principal,
            session_id="plain",
            call_id="c",
            idempotency_key=None,
            attempt=1,
            timeout=None,
            deps=build_retail(backend=backend).guard.env.deps,
        )

    def __call__(self, name: str, text: str) -> dict[str, Any]:
        if name not in self.allowed or self.scopes[name] not in self.principal.scopes:
            raise PermissionError(name)
        args = json.loads(text)
        if not isinstance(args, dict):
            raise ValueError("not an object")
        self.steps += 1
        canonical = json.dumps(args, sort_keys=True, separators=(",", ":"))
        count = self.identical[name, canonical] = self.identical.get((name, canonical), 0) + 1
        if self.steps > 10**9 or count > 10**9:
            raise RuntimeError("budget")
        return getattr(self, name)(args)

    def get_user_details(self, args: dict[str, Any]) -> dict[str, Any]:
        if args or not {"find_user_id_by_email", "find_user_id_by_name_zip"} & self.ran:
            raise ValueError("arguments or prerequisite")
        raw = self.tools["get_user_details"].handler(SimpleNamespace(), self.context)
        view = {
            "user_id": raw["user_id"],
            "first_name": raw["first_name"],
            "last_name": raw["last_name"],
            "payment_methods": [
                {"id": m["id"], "kind": m["kind"], "balance_cents": m["balance_cents"]}
                for m in raw["payment_methods"]
            ],
            "orders": list(raw["orders"]),
        }
        self.seen.update(("user", "payment_methods.*.id", m["id"]) for m in view["payment_methods"])
        return view

    def get_order_details(self, args: dict[str, Any]) -> dict[str, Any]:
        order_id = args.get("order_id")
        if (
            set(args) != {"order_id"}
            or not isinstance(order_id, str)
            or not ORDER_ID.match(order_id)
        ):
            raise ValueError("arguments")
        found = self.backend.order(order_id)
        if found is None or found.user_id != self.principal.id:
            raise LookupError(order_id)
        raw = self.tools["get_order_details"].handler(SimpleNamespace(**args), self.context)
        view = {
            "order_id": raw["order_id"],
            "status": raw["status"],
            "items": [
                {
                    "item_id": i["item_id"],
                    "product_id": i["product_id"],
                    "name": i["name"],
                    "options": dict(i["options"]),
                    "price_cents": i["price_cents"],
                }
                for i in raw["items"]
            ],
            "payment_method_id": raw["payment_method_id"],
        }
        self.records.add(("get_order_details", order_id))
        self.seen.update(("order", "items.*.item_id", i["item_id"]) for i in view["items"])
        return view

    def get_product_details(self, args: dict[str, Any]) -> dict[str, Any]:
        product_id = args.get("product_id")
        if (
            set(args) != {"product_id"}
            or not isinstance(product_id, str)
            or not PRODUCT_ID.match(product_id)
        ):
            raise ValueError("arguments")
        raw = self.tools["get_product_details"].handler(SimpleNamespace(**args), self.context)
        view = {
            "product_id": raw["product_id"],
            "name": raw["name"],
            "variants": [
                {
                    "item_id": v["item_id"],
                    "options": dict(v["options"]),
                    "price_cents": v["price_cents"],
                    "available": v["available"],
                }
                for v in raw["variants"]
            ],
        }
        self.seen.update(("product", "variants.*.item_id", v["item_id"]) for v in view["variants"])
        return view


def retail_rows() -> list[tuple[str, Callable[[int], Any], Callable[[int], Any]]]:
    """The retail reads: plain-Python rules against the gate, on the same multi-kilobyte store."""
    backend = big_retail()
    policy = retail_policy(
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
    )
    session = build_retail(backend=backend, policy=policy).session("bench-retail")
    mia = '{"first_name": "Mia", "last_name": "Li", "zip": "94110"}'
    assert session.execute("find_user_id_by_name_zip", mia).ok
    plain = PlainRetail(backend, session.principal)
    rows: list[tuple[str, Callable[[int], Any], Callable[[int], Any]]] = []
    for name, text in RETAIL_CALLS.items():

        def naive(_: int, name: str = name, text: str = text) -> Any:
            return plain(name, text)

        def guarded(_: int, name: str = name, text: str = text) -> Any:
            return session.execute(name, text, call_id="c")

        result = guarded(0)
        assert result.ok and result.data == naive(0), (name, result)
        size = len(json.dumps(result.data)) / 1024
        rows.append((f"retail {name} ({size:.0f} KB)", naive, guarded))
    return rows


def timed(run: Callable[[int], Any], n: int) -> list[int]:
    """Per-call nanoseconds on the calling thread, GC off so a collection lands on no one call."""
    for i in range(min(n, 500)):  # warm up caches, pydantic's validators, the stores
        run(i)
    samples = []
    gc.disable()
    try:
        for i in range(n):
            start = time.perf_counter_ns()
            run(i)
            samples.append(time.perf_counter_ns() - start)
    finally:
        gc.enable()
    return samples


def summary(samples: list[int]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) / 1000, ordered[int(len(ordered) * 0.99)] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=20_000, help="calls per measurement")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per row")
    options = parser.parse_args()
    n, blocks = options.n, options.blocks

    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**15, currency="BRL")
    policy = Policy(
        roles={ROLE: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
    )
    shop = build_shop(orders=[big], policy=policy)
    guard = shop.guard
    tools = {spec.name: spec for spec in guard.registry.values()}

    context = ToolContext(
        principal=PRINCIPAL,
        session_id="naive",
        call_id="c",
        idempotency_key=None,
        attempt=1,
        timeout=10.0,
    )

    def naive_get(_: int) -> Any:
        args = json.loads('{"order_id": "ORD-7777"}')
        return tools["get_order"].handler(SimpleNamespace(**args), context)

    session = guard.session("bench-read", PRINCIPAL)

    def guarded_get(_: int) -> Any:
        return session.execute("get_order", '{"order_id": "ORD-7777"}', call_id="c")

    def refund_text(i: int) -> str:
        return f'{{"order_id": "ORD-7777", "amount_cents": {i + 1}, "currency": "BRL", "reason": "damaged"}}'

    offset = [0]

    def naive_refund(i: int) -> Any:
        args = json.loads(refund_text(i + offset[0]))
        keyed = replace(context, idempotency_key=f"naive-{i}-{offset[0]}")
        return tools["refund_order"].handler(SimpleNamespace(**args), keyed)

    writer = guard.session("bench-write", PRINCIPAL)
    writer.execute("get_order", '{"order_id": "ORD-7777"}')

    def guarded_refund(i: int) -> Any:
        pending = writer.execute("refund_order", refund_text(i + offset[0]))
        result = guard.approve(pending.approval_id or "", by="bench")
        assert result.ok, result
        return result

    assert tools["get_order"] and guarded_get(0).ok
    rows = []
    for label, naive, guarded in (
        ("get_order", naive_get, guarded_get),
        ("refund_order (proposed + approved)", naive_refund, guarded_refund),
        *profile_rows(n, context),
        *retail_rows(),
    ):
        base: list[int] = []
        gated: list[int] = []
        for _ in range(blocks):  # alternate blocks: load from other processes lands on both
            offset[0] += 10 * n
            base += timed(naive, n // blocks)
            offset[0] += 10 * n
            gated += timed(guarded, n // blocks)
        rows.append((label, *summary(base), *summary(gated)))

    print(f"calls per measurement: {n}, in {blocks} blocks alternating with the baseline")
    print(
        f"{'tool':40} {'naive med':>10} {'naive p99':>10} {'guard med':>10} {'guard p99':>10} "
        f"{'added med':>10} {'ratio':>6}"
    )
    for label, base_med, base_p99, med, p99 in rows:
        print(
            f"{label:40} {base_med:9.2f}µ {base_p99:9.2f}µ {med:9.2f}µ {p99:9.2f}µ "
            f"{med - base_med:9.2f}µ {med / base_med:5.1f}x"
        )
    guard_med = {label: med for label, _, _, med, _ in rows}
    print(
        "guarded 4 KB read / guarded shop read: "
        f"{guard_med['get_profile (4 KB result)'] / guard_med['get_order']:.2f}x (goal <= 1.5x)"
    )
    retail = [(base, med) for label, base, _, med, _ in rows if label.startswith("retail ")]
    print(
        "retail reads, gate / plain-Python rules (sum of medians): "
        f"{sum(m for _, m in retail) / sum(b for b, _ in retail):.2f}x (goal <= 3x)"
    )


if __name__ == "__main__":
    main()
