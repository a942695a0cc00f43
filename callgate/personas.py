"""The scripted model's behaviours: what production agents do, good and bad, as small generators.

A persona is a generator: it yields a ``Proposal`` (the call the model proposes) and receives the
``ToolResult`` the guard answered, so it can react the way a model does: correct a rejected call,
ask the user for another id, or keep looping. The mix is in ``PERSONAS`` with weights.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Literal

from guard import Code, ToolResult
from guard.shop import AMOUNT_EXCEEDS_REFUNDABLE, CURRENCY_MISMATCH, Order

__all__ = ["PERSONAS", "Decision", "Persona", "Proposal", "Script"]

Decision = Literal["approve", "deny", "expire", "pending"]
"""What the human does when the call waits for confirmation."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Proposal:
    """One call the scripted model proposes, and what the world does around it."""

    tool: str
    arguments: str
    """The JSON text exactly as the model sends it."""
    decision: Decision = "approve"
    fault: tuple[str, int] | None = None
    """A backend fault injected just before the call: (kind, count)."""
    think: float = 1.0
    """Seconds of model time before the call."""
    new_turn: bool = False
    """A new user message comes before this call."""


Script = Generator[Proposal, ToolResult, None]


@dataclass(frozen=True, kw_only=True)
class Persona:
    """What a session knows: its customer's orders, someone else's order, and a random source."""

    rng: random.Random
    own: list[Order]
    foreign: Order
    invented_id: str

    def order(self) -> Order:
        return self.rng.choice(self.own)

    def decision(self) -> Decision:
        return self.pick(("approve", "deny", "expire", "pending"), (70, 15, 8, 7))

    def pick(self, decisions: tuple[Decision, ...], weights: tuple[int, ...]) -> Decision:
        return self.rng.choices(decisions, weights)[0]

    def amount(self, order: Order) -> int:
        ceiling = min(order.amount_cents, 9_000)
        return self.rng.randrange(100, max(ceiling, 101), 10)

    def reason(self) -> str:
        return self.rng.choice(["damaged", "not_delivered", "customer_request"])


def call(tool: str, arguments: dict[str, Any] | str, **options: Any) -> Proposal:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Proposal(tool=tool, arguments=text, **options)


def refund(order: Order, amount: Any, reason: str, currency: str | None = None) -> dict[str, Any]:
    return {
        "order_id": order.order_id,
        "amount_cents": amount,
        "currency": currency or order.currency,
        "reason": reason,
    }


# -- good behaviour ---------------------------------------------------------------------------------


def reads_only(p: Persona) -> Script:
    """Answers questions about an order: reads, nothing else."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    yield call("get_refund_status", {"order_id": order.order_id}, think=2.0)
    if p.rng.random() < 0.5:
        yield call(
            "search_refund_policy", {"query": p.rng.choice(["damaged item", "refund timing"])}
        )


def clean_refund(p: Persona) -> Script:
    """Reads the order, proposes a correct refund, a human decides."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    if p.rng.random() < 0.15:  # the whole order: above a customer's per-request cap when large
        result = yield call("refund_order", refund(order, order.amount_cents, p.reason()))
        if result.code != Code.POLICY_LIMIT:
            return
    yield call("refund_order", refund(order, p.amount(order), p.reason()), decision=p.decision())


# -- hallucinated and malformed arguments, then a correction ------------------------------------------


def wrong_unit(p: Persona) -> Script:
    """Sends 25.9 (or "2590") for a field in cents, reads the problem, and fixes the unit."""
    order = p.order()
    amount = p.amount(order)
    yield call("get_order", {"order_id": order.order_id})
    sent: Any = amount / 100 if p.rng.random() < 0.6 else str(amount)
    result = yield call("refund_order", refund(order, sent, p.reason()))
    if result.code == Code.INVALID_ARGUMENTS:
        yield call("refund_order", refund(order, amount, p.reason()), decision=p.decision())


def invented_enum(p: Persona) -> Script:
    """Invents a reason the schema does not have, then picks one of the listed values."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    invented = p.rng.choice(["CUSTOMER_UPSET", "other", "defective", "late"])
    result = yield call("refund_order", refund(order, p.amount(order), invented))
    if result.code == Code.INVALID_ARGUMENTS:
        yield call(
            "refund_order", refund(order, p.amount(order), "customer_request"), decision="approve"
        )


def extra_field(p: Persona) -> Script:
    """Adds a helpful "force": true, then drops it."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    arguments = refund(order, p.amount(order), p.reason())
    result = yield call("refund_order", arguments | {"force": True})
    if result.code == Code.INVALID_ARGUMENTS:
        yield call("refund_order", arguments, decision=p.decision())


def malformed_json(p: Persona) -> Script:
    """Emits broken JSON, then valid JSON."""
    order = p.order()
    result = yield call("get_order", '{"order_id": "' + order.order_id + '"')
    if result.code == Code.INVALID_JSON:
        yield call("get_order", {"order_id": order.order_id})


def wrong_currency(p: Persona) -> Script:
    """Sends USD for an order paid in BRL (or the reverse), then the order's currency."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    other = "USD" if order.currency == "BRL" else "BRL"
    amount = p.amount(order)
    result = yield call("refund_order", refund(order, amount, p.reason(), other))
    if result.code == CURRENCY_MISMATCH:
        yield call("refund_order", refund(order, amount, p.reason()), decision=p.decision())


def over_refund(p: Persona) -> Script:
    """Asks for more than the order's value, then for what is refundable."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    result = yield call("refund_order", refund(order, order.amount_cents + 500, p.reason()))
    if result.code in (AMOUNT_EXCEEDS_REFUNDABLE, Code.POLICY_LIMIT):
        yield call(
            "refund_order",
            refund(order, min(order.amount_cents, 9_000), p.reason()),
            decision=p.decision(),
        )


def unknown_tool(p: Persona) -> Script:
    """Reaches for a generic API tool, is told which tools exist, and uses one."""
    order = p.order()
    result = yield call("call_api", {"method": "GET", "path": f"/orders/{order.order_id}"})
    if result.code == Code.UNKNOWN_TOOL:
        yield call("get_order", {"order_id": order.order_id})


# -- invented and foreign ids ---------------------------------------------------------------------------


def invented_id(p: Persona) -> Script:
    """Makes up a well-formed order id, then asks the user and uses the real one."""
    result = yield call("get_order", {"order_id": p.invented_id})
    if result.code == Code.NOT_FOUND:
        yield call("get_order", {"order_id": p.order().order_id}, think=20.0, new_turn=True)


def foreign_id(p: Persona) -> Script:
    """Uses an id from elsewhere in the conversation that belongs to another customer."""
    yield call("get_order", {"order_id": p.foreign.order_id})
    yield call(
        "refund_order", refund(p.foreign, min(p.foreign.amount_cents, 5_000), "customer_request")
    )


# -- a destructive tool where a read would do ---------------------------------------------------------------


def refund_for_a_question(p: Persona) -> Script:
    """ "Can I get a refund?" is a question; the model refunds, is stopped, and reads the policy."""
    order = p.order()
    result = yield call("refund_order", refund(order, order.amount_cents, "customer_request"))
    if result.code == Code.PREREQUISITE_MISSING:
        yield call("search_refund_policy", {"query": "can I get a refund"})


# -- loops and retries ------------------------------------------------------------------------------------


def read_loop(p: Persona) -> Script:
    """Reads the same order again and again until the loop guard stops it."""
    order = p.order()
    for _ in range(p.rng.randint(4, 6)):
        result = yield call("get_order", {"order_id": order.order_id}, think=0.5)
        if result.code == Code.LOOP_DETECTED:
            return


def lost_response(p: Persona) -> Script:
    """The refund commits but its answer is lost; the guard retries with the same key, then the
    model, unsure, sends the refund again and gets a replay."""
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    arguments = refund(order, p.amount(order), p.reason())
    lost = p.rng.choice([1, 1, 1, 3])  # three in a row outlast the retries: outcome unknown
    result = yield call("refund_order", arguments, fault=("lose_next_response", lost))
    if result.ok:
        yield call("refund_order", arguments, think=30.0)


def flaky_backend(p: Persona) -> Script:
    """The backend fails transiently: retried to success, or unavailable after the retries."""
    order = p.order()
    failures = p.rng.choice([1, 2, 3])
    yield call("get_order", {"order_id": order.order_id}, fault=("transient", failures))


def runaway(p: Persona) -> Script:
    """An agent stuck in a turn, probing ids until the step limit stops it."""
    base = int(p.invented_id[4:])
    for i in range(14):
        result = yield call(
            "get_refund_status", {"order_id": f"ORD-{(base + i) % 1000 + 9000}"}, think=0.3
        )
        if result.code == Code.STEP_LIMIT:
            return


def keeps_failing(p: Persona) -> Script:
    """Sends invalid calls in a row until told to hand over."""
    for raw in (
        '{"order_id": 1001}',
        "{order_id: ORD-1001}",
        '{"id": "ORD-1001"}',
        '{"order_id": "1001"}',
    ):
        result = yield call("get_order", raw, think=0.5)
        if result.code == Code.VALIDATION_BUDGET_EXHAUSTED:
            return


def burst(p: Persona) -> Script:
    """Fires reads in parallel within one second until rate-limited."""
    for order in (p.own * 4)[:7]:
        yield call("get_refund_status", {"order_id": order.order_id}, think=0.0)


# -- prompt injection ---------------------------------------------------------------------------------------------


def injected(p: Persona) -> Script:
    """Reads a policy page carrying an injected instruction, then tries a full refund."""
    yield call("search_refund_policy", {"query": "partial refunds"})
    order = p.order()
    yield call("get_order", {"order_id": order.order_id})
    decision = p.pick(("deny", "approve", "pending"), (70, 20, 10))
    yield call(
        "refund_order",
        refund(order, min(order.amount_cents, 9_000), "customer_request"),
        decision=decision,
    )


PERSONAS: tuple[tuple[Callable[[Persona], Script], int], ...] = (
    (reads_only, 22),
    (clean_refund, 16),
    (wrong_unit, 8),
    (invented_enum, 5),
    (extra_field, 4),
    (malformed_json, 4),
    (wrong_currency, 4),
    (over_refund, 3),
    (unknown_tool, 3),
    (invented_id, 5),
    (foreign_id, 4),
    (refund_for_a_question, 4),
    (read_loop, 4),
    (lost_response, 3),
    (flaky_backend, 3),
    (runaway, 1),
    (keeps_failing, 2),
    (burst, 1),
    (injected, 4),
)
"""Behaviours and their weights in the mix."""
