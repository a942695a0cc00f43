"""What the guard costs per call, against a naive loop measured in the same run.

The naive loop is what an agent framework does without a guard: ``json.loads``, a dict lookup, a
call of the same handler the guard calls (with the same backend). The guard runs the full pipeline
with the null observer and in-memory stores, so the difference is the guard's own work: validation,
keys, counters, result filtering, bookkeeping. Run: ``.venv/bin/python bench/guard_overhead.py``.
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

from guard import Policy, Principal, RolePolicy, ToolContext
from guard.shop import Order, build_shop

ROLE = "bench"
PRINCIPAL = Principal(id="CUS-1", role=ROLE, scopes=frozenset({"orders:read", "refunds:write"}))


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


if __name__ == "__main__":
    main()
