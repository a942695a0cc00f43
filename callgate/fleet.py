"""A simulated agent fleet: seeded sessions of scripted models sending traffic through the real guard.

The fleet keeps its own tally from the guard's results, so the end-to-end test can check that every
count the report shows (from spans, through files and DuckDB) equals what the guard actually did.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from callgate.personas import PERSONAS, Decision, Persona, Proposal, Script
from guard import Clock, Code, Observer, RateLimit, ReasonCode, Session, ToolResult
from guard.shop import Order, ShopApp, build_shop, shop_policy
from guard.stores import ApprovalStore
from guard.testing import ManualClock

__all__ = ["Fleet", "Tally", "last_whole_day"]

LOOP_GUARDS = frozenset({Code.LOOP_DETECTED, Code.STEP_LIMIT, Code.VALIDATION_BUDGET_EXHAUSTED})
DAY = 86_400.0


@dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """One result the guard gave, in the order the fleet saw it."""

    session: str
    tool: str
    code: ReasonCode
    replayed: bool
    resumed: bool
    approval_id: str | None
    needs_human: bool
    """``ToolResult.needs_human``: a human must decide ``approval_id``."""
    at: float


@dataclass
class Tally:
    """What the guard did, counted from its own results."""

    outcomes: list[Answer] = field(default_factory=list)
    sessions: int = 0
    side_effects: int = 0

    def by_tool_and_code(self) -> Counter[tuple[str, str]]:
        return Counter((o.tool, str(o.code)) for o in self.outcomes)

    def replays(self) -> int:
        return sum(o.replayed for o in self.outcomes)

    def loop_guards(self) -> Counter[str]:
        return Counter(str(o.code) for o in self.outcomes if o.code in LOOP_GUARDS)

    def confirmations(self) -> Counter[str]:
        """required, then each approval's end: executed, refused on re-check, denied, expired, pending."""
        asked = {o.approval_id for o in self.outcomes if o.needs_human and not o.resumed}
        ends: dict[str, str] = {}
        for o in self.outcomes:
            if (
                o.resumed and o.approval_id is not None and o.approval_id in asked
            ):  # the latest counts
                ends[o.approval_id] = _end(o.code)
        counts = Counter(ends.values())
        counts["required"] = len(asked)
        counts["pending"] = len(asked) - len(ends)
        return counts

    def recovery(self, k: int = 3) -> tuple[int, int]:
        """(recovered, fixable rejections): a fixable rejection followed by an OK call to the same
        tool in the same session within the next ``k`` calls."""
        by_session: dict[str, list[Answer]] = defaultdict(list)
        for o in sorted(self.outcomes, key=lambda o: o.at):
            by_session[o.session].append(o)
        recovered = rejected = 0
        for calls in by_session.values():
            for i, o in enumerate(calls):
                if o.code.fixable:
                    rejected += 1
                    recovered += any(
                        n.tool == o.tool and n.code is Code.OK for n in calls[i + 1 : i + 1 + k]
                    )
        return recovered, rejected


def _end(code: ReasonCode) -> str:
    if code is Code.OK:
        return "executed"
    if code is Code.CONFIRMATION_DENIED:
        return "denied"
    if code is Code.CONFIRMATION_EXPIRED:
        return "expired"
    return "refused"


def last_whole_day(now: float | None = None) -> float:
    """The start of the last UTC day that ended at least an hour before ``now`` (default: the
    time now). A run over it puts its calls at the same times of day whenever it runs, so the
    shop's daily limits count the same calls (200 sessions made 605 or 606 calls by the hour
    they ran), and the confirmations still open at its end expire in the past."""
    ended = ((time.time() if now is None else now) - 3_600) // DAY * DAY
    return ended - DAY


@dataclass
class Fleet:
    """``sessions`` conversations over the last day, reproducible from ``seed``."""

    sessions: int = 2_000
    seed: int = 7
    observer: Observer | None = None
    approvals: ApprovalStore | None = None
    """Where the shop keeps its approvals (None: in memory): the demo's SQLite file, which
    ``callgate trace --store`` and the dashboard read the deciders' names from."""
    start: float = field(default_factory=last_whole_day)
    """Sessions start over the day after this (by default :func:`last_whole_day`)."""

    def run(self, progress: Callable[[int], None] | None = None) -> Tally:
        rng = random.Random(self.seed)
        clock = ManualClock(start=self.start)
        orders, by_customer = _orders(rng, self.sessions)
        shop = build_shop(
            orders=orders,
            clock=clock,
            observer=self.observer,
            approvals=self.approvals,
            policy=shop_policy(rate_limit=RateLimit(calls=5, seconds=1.0)),
        )
        tally, later = Tally(), list[tuple[str, str, float]]()
        customers = sorted(by_customer)
        behaviours, weights = zip(*PERSONAS, strict=True)
        for number in range(self.sessions):
            # Each conversation starts in its own slot of the day, as concurrent ones would: the
            # time a human takes to approve delays that conversation, not the ones after it.
            clock.advance(self.start + DAY * (number + rng.random()) / self.sessions - clock.now())
            later = _expire(shop, clock, tally, later, clock.now())
            customer = customers[number % len(customers)]
            persona = Persona(
                rng=rng,
                own=by_customer[customer],
                foreign=rng.choice(orders),
                invented_id=f"ORD-{rng.randint(9000, 9999)}",
            )
            role = rng.choices(["customer", "support_agent", "viewer"], [90, 8, 2])[0]
            session_id = f"s-{self.seed}-{number:05d}"
            script = rng.choices(behaviours, weights)[0](persona)
            later += _converse(shop, clock, tally, script, session_id, customer, role)
            tally.sessions += 1
            if progress is not None:
                progress(1)
        clock.advance(shop.guard.policy.confirmation_ttl + 1)
        _expire(shop, clock, tally, later, float("inf"))
        tally.side_effects = shop.backend.side_effects
        return tally


def _expire(
    shop: ShopApp,
    clock: ManualClock,
    tally: Tally,
    later: list[tuple[str, str, float]],
    until: float,
) -> list[tuple[str, str, float]]:
    """Approvals nobody decided in time: the host's late approval finds them expired."""
    for session_id, approval_id, expires_at in later:
        if expires_at < until:
            _record(
                tally, clock, session_id, shop.guard.approve(approval_id, by="approver-late"), True
            )
    return [item for item in later if item[2] >= until]


def _converse(
    shop: ShopApp,
    clock: ManualClock,
    tally: Tally,
    script: Script,
    session_id: str,
    customer: str,
    role: str,
) -> list[tuple[str, str, float]]:
    """Runs one conversation; returns the approvals left to expire."""
    session = shop.session(session_id, customer, role)
    session.next_turn()  # the customer's first message: turns are marked, each gets its budget
    expiring: list[tuple[str, str, float]] = []
    try:
        proposal = next(script)
        while True:
            result = _propose(shop, clock, tally, session, proposal, expiring)
            proposal = script.send(result)
    except StopIteration:
        return expiring


def _propose(
    shop: ShopApp,
    clock: ManualClock,
    tally: Tally,
    session: Session,
    proposal: Proposal,
    expiring: list[tuple[str, str, float]],
) -> ToolResult:
    clock.advance(proposal.think)
    if proposal.new_turn:
        session.next_turn()
    if proposal.fault is not None:
        shop.backend.inject(*proposal.fault)
    call_id = f"call_{tally.sessions}_{len(tally.outcomes)}"
    result = session.execute(proposal.tool, proposal.arguments, call_id=call_id)
    _record(tally, clock, session.id, result, False)
    if result.needs_human and result.approval_id is not None:
        expires_at = float((result.data or {}).get("expires_at", 0.0))
        result = (
            _decide(
                shop,
                clock,
                tally,
                session.id,
                result.approval_id,
                expires_at,
                proposal.decision,
                expiring,
            )
            or result
        )
    return result


def _decide(
    shop: ShopApp,
    clock: ManualClock,
    tally: Tally,
    session_id: str,
    approval_id: str,
    expires_at: float,
    decision: Decision,
    expiring: list[tuple[str, str, float]],
) -> ToolResult | None:
    if decision == "pending":
        return None
    if decision == "expire":
        if all(item[1] != approval_id for item in expiring):
            expiring.append((session_id, approval_id, expires_at))
        return None
    action = shop.guard.pending(approval_id)
    if action is not None and action.decided_at is not None:
        return None  # decided earlier in this conversation: the proposal was a repeat
    clock.advance(random.Random(approval_id).uniform(20, 240))  # a human takes a while
    decide = shop.guard.approve if decision == "approve" else shop.guard.deny
    result = decide(approval_id, by=f"approver-{approval_id[-2:]}")
    _record(tally, clock, session_id, result, True)
    return result


def _record(
    tally: Tally, clock: ManualClock, session_id: str, result: ToolResult, resumed: bool
) -> None:
    tally.outcomes.append(
        Answer(
            session=session_id,
            tool=result.tool or "",
            code=result.code,
            replayed=result.replayed,
            resumed=resumed,
            approval_id=result.approval_id,
            needs_human=result.needs_human,
            at=clock.now(),
        )
    )


def _orders(rng: random.Random, sessions: int) -> tuple[list[Order], dict[str, list[Order]]]:
    """Customers with one to three orders each; ids ORD-1000 upwards, ORD-9xxx left unused."""
    customers = max(2, min(sessions // 2, 3_000))
    orders: list[Order] = []
    by_customer: dict[str, list[Order]] = {}
    for c in range(1, customers + 1):
        mine = []
        for _ in range(rng.choice([1, 1, 2, 3])):
            order = Order(
                order_id=f"ORD-{1000 + len(orders)}",
                customer_id=f"CUS-{c}",
                amount_cents=rng.randrange(1_000, 30_000, 10),
                currency=rng.choice(["BRL", "USD"]),
                status=rng.choices(["delivered", "shipped", "pending"], [88, 8, 4])[0],
                disputed=rng.random() < 0.02,
            )
            orders.append(order)
            mine.append(order)
        by_customer[f"CUS-{c}"] = mine
    return orders, by_customer


def demo_shop(clock: Clock, *, sessions: int = 2_000, seed: int = 7) -> ShopApp:
    """The shop as ``callgate demo`` builds it (its orders for ``sessions`` and ``seed``, its rate
    limit), on ``clock``, with nothing done yet: the target to replay the demo's calls against,
    ``callgate replay FILE --app callgate.fleet:demo_shop``."""
    orders, _ = _orders(random.Random(seed), sessions)
    return build_shop(
        orders=orders, clock=clock, policy=shop_policy(rate_limit=RateLimit(calls=5, seconds=1.0))
    )
