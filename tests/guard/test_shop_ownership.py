"""The reference shop checks before it reads: a foreign order never reaches a handler.

Every shop tool that takes an order id refuses another customer's order in the rules stage,
before the handler (and its backend fetch) runs, with the NOT_FOUND a missing order gets, word
for word. Staff roles still see every order. The evaluation's unauthorised-call prevention then
counts the attempt as prevented. The retail example's order reads do the same.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from callgate.cli import main
from examples.retail import build_retail
from examples.retail.tools import CUSTOMER_SCOPES
from guard import Principal
from guard.shop import build_shop
from guard.testing import ManualClock

ORDER_TOOLS = sorted(
    name
    for name, spec in build_shop(clock=ManualClock()).guard.registry.items()
    if "order_id" in spec.arguments.model_fields
)
"""The shop tools that take an order id: every one of them is attacked below."""

REFUND = {"amount_cents": 100, "currency": "USD", "reason": "damaged"}


def arguments(tool: str, order_id: str) -> str:
    extra = REFUND if tool == "refund_order" else {}
    return json.dumps({"order_id": order_id, **extra})


class TestShopChecksBeforeReading:
    def test_every_tool_taking_an_order_id_is_covered(self) -> None:
        """The attack list is the registry's: a new tool with an order id is attacked too."""
        assert {"get_order", "get_refund_status", "refund_order"} <= set(ORDER_TOOLS)

    @pytest.mark.parametrize("tool", ORDER_TOOLS)
    def test_a_foreign_order_is_refused_before_any_read(self, tool: str) -> None:
        """CUS-1 names CUS-2's ORD-1002: NOT_FOUND in the rules stage, no backend request, the
        same words as for a missing ORD-9999, and no refund."""
        shop = build_shop(clock=ManualClock())
        session = shop.session("s1", "CUS-1")
        if tool == "refund_order":  # its prerequisite first: the shop's own order
            assert session.execute("get_order", arguments("get_order", "ORD-1001")).ok
        requests = shop.backend.requests
        foreign = session.execute(tool, arguments(tool, "ORD-1002"))
        missing = session.execute(tool, arguments(tool, "ORD-9999"))
        assert shop.backend.requests == requests and shop.backend.side_effects == 0
        if tool == "refund_order":  # no get_order of it ran: refused before its check
            assert foreign.code == missing.code == "PREREQUISITE_MISSING"
        else:
            assert foreign.code == missing.code == "NOT_FOUND"
            assert foreign.message.replace("ORD-1002", "X") == missing.message.replace(
                "ORD-9999", "X"
            )
            assert foreign.outcome == "not_applied" and foreign.data is None

    @pytest.mark.parametrize("tool", [t for t in ORDER_TOOLS if t != "refund_order"])
    def test_the_refusal_happens_in_the_rules_stage(self, tool: str) -> None:
        """The observer sees the rules stage end the call: the execute stage never starts."""
        from guard.testing import RecordingObserver

        observer = RecordingObserver()
        shop = build_shop(clock=ManualClock(), observer=observer)
        shop.session("s1", "CUS-1").execute(tool, arguments(tool, "ORD-1002"))
        call, _ = observer.ended[-1]
        assert call.rejected_stage == "rules"

    @pytest.mark.parametrize("tool", [t for t in ORDER_TOOLS if t != "refund_order"])
    def test_staff_and_owners_still_read(self, tool: str) -> None:
        """The owner reads their order; a support agent reads anyone's."""
        shop = build_shop(clock=ManualClock())
        assert shop.session("s1", "CUS-2").execute(tool, arguments(tool, "ORD-1002")).ok
        agent = shop.session("s2", "AGENT-1", role="support_agent")
        assert agent.execute(tool, arguments(tool, "ORD-1002")).ok


class TestRetailChecksBeforeReading:
    def test_a_foreign_order_is_refused_before_the_handler(self) -> None:
        """get_order_details of another user's order: NOT_FOUND from the rules stage, worded as
        for a missing order."""
        from guard.testing import RecordingObserver

        observer = RecordingObserver()
        retail = build_retail(clock=ManualClock(), observer=observer)
        backend = retail.backend
        users = list(backend.users.values())
        mine, theirs = users[0], next(u for u in users[1:] if u.orders)
        principal = Principal(id=mine.user_id, role="customer", scopes=CUSTOMER_SCOPES)
        session = retail.guard.session("r1", principal)
        foreign = session.execute("get_order_details", json.dumps({"order_id": theirs.orders[0]}))
        call, _ = observer.ended[-1]
        assert foreign.code == "NOT_FOUND" and call.rejected_stage == "rules"
        missing = session.execute("get_order_details", json.dumps({"order_id": "#W9999"}))
        assert missing.code == "NOT_FOUND"
        assert foreign.message.replace(theirs.orders[0], "X") == missing.message.replace(
            "#W9999", "X"
        )


class TestEvaluationCountsItPrevented:
    def test_a_foreign_read_in_an_adversarial_case_is_prevented(self, tmp_path: object) -> None:
        """``callgate eval``: an adversarial case reading another customer's order and its
        refunds reaches no handler: prevention 2/2, and the command exits 0."""
        from pathlib import Path

        cases = Path(str(tmp_path)) / "cases.jsonl"
        observed = [
            {"name": tool, "arguments": {"order_id": "ORD-1002"}}
            for tool in ("get_order", "get_refund_status")
        ]
        case = {"id": "forged", "principal": "CUS-1", "expected": [], "observed": observed}
        cases.write_text(json.dumps({**case, "adversarial": True}) + "\n")
        result = CliRunner().invoke(main, ["eval", str(cases), "--json"])
        assert result.exit_code == 0, result.output
        prevention = json.loads(result.output)["unauthorised_prevention"]
        assert (prevention["numerator"], prevention["denominator"]) == (2, 2)
