"""What the guard costs per call, against a naive loop measured in the same run.

The naive loop is what an agent framework does without a guard: ``json.loads``, a dict lookup, a
call of the same handler the guard calls (with the same backend). The guard runs the full pipeline
with the null observer and in-memory stores, so the difference is the guard's own work: validation,
keys, counters, result filtering, bookkeeping. Run: ``.venv/bin/python bench/guard_overhead.py``.

The ``get_profile`` rows are a read whose result is a multi-kilobyte record (a profile with its
orders, filtered through a result model): they show what result handling costs as results grow.
The last line compares the guarded 4 KB read with the guarded shop read (goal: at most 1.5x).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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
    n = parser.parse_args().n

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
    ):
        offset[0] += 10 * n
        base_med, base_p99 = summary(timed(naive, n))
        offset[0] += 10 * n
        med, p99 = summary(timed(guarded, n))
        rows.append((label, base_med, base_p99, med, p99))

    print(f"calls per measurement: {n}")
    print(
        f"{'tool':36} {'naive med':>10} {'naive p99':>10} {'guard med':>10} {'guard p99':>10} "
        f"{'added med':>10} {'ratio':>6}"
    )
    for label, base_med, base_p99, med, p99 in rows:
        print(
            f"{label:36} {base_med:9.2f}µ {base_p99:9.2f}µ {med:9.2f}µ {p99:9.2f}µ "
            f"{med - base_med:9.2f}µ {med / base_med:5.1f}x"
        )
    guard_med = {label: med for label, _, _, med, _ in rows}
    print(
        "guarded 4 KB read / guarded shop read: "
        f"{guard_med['get_profile (4 KB result)'] / guard_med['get_order']:.2f}x (goal <= 1.5x)"
    )


if __name__ == "__main__":
    main()
