"""The retail support domain (examples/retail, docs/domains.md): its scenario, step by step.

Every issue-11 item is exercised through the public API only; the side-effect count of the store
is the assertion that matters most.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from callgate.cli import main
from examples.retail import RETAIL_CODES, RetailApp, build_retail, retail_policy
from examples.retail.tools import CUSTOMER_SCOPES
from guard import Code, Principal, Session, ToolResult
from guard.testing import ManualClock, RecordingObserver

MIA = {"first_name": "Mia", "last_name": "Li", "zip": "94110"}
KEYBOARD_FOR_BLUE = {
    "order_id": "#W2001",
    "item_ids": ["KB-RED-FULL"],
    "new_item_ids": ["KB-BLUE-FULL"],
    "payment_method_id": "credit_card_9231",
}


def call(session: Session, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    return session.execute(tool, json.dumps(arguments or {}))


@pytest.fixture
def retail() -> RetailApp:
    return build_retail(clock=ManualClock(), observer=RecordingObserver())


def identified(retail: RetailApp, session_id: str = "chat-1") -> Session:
    """A chat where Mia has been identified and her profile and first order read."""
    session = retail.session(session_id)
    assert call(session, "find_user_id_by_name_zip", MIA).ok
    assert call(session, "get_user_details").ok
    assert call(session, "get_order_details", {"order_id": "#W2001"}).ok
    assert call(session, "get_product_details", {"product_id": "P-KEYBOARD"}).ok
    return session


class TestAuthentication:
    """Item 2: a chat starts anonymous and learns who the user is from a lookup."""

    def test_a_call_before_identification_is_fixable_auth_required(self, retail: RetailApp) -> None:
        """AUTH_REQUIRED names both lookups; it is fixable, not TOOL_NOT_ALLOWED's 'do not retry'."""
        result = call(retail.session("c"), "get_order_details", {"order_id": "#W2001"})
        assert result.code is Code.AUTH_REQUIRED and result.fixable
        assert "find_user_id_by_email or find_user_id_by_name_zip" in result.message
        assert "do not retry" not in result.message.lower()

    def test_the_lookup_binds_the_principal_and_keeps_the_session(self, retail: RetailApp) -> None:
        """After the lookup the same session acts for Mia; its step counter carried over."""
        observer = retail.guard.observer
        assert isinstance(observer, RecordingObserver)
        session = retail.session("c")
        assert call(session, "get_order_details", {"order_id": "#W2001"}).code is Code.AUTH_REQUIRED
        found = call(session, "find_user_id_by_email", {"email": "mia.li@example.com"})
        assert (
            found.ok and session.principal.id == "mia_li_3668" and session.principal.authenticated
        )
        binding, _ = observer.ended[-1]
        assert binding.previous_principal is not None
        assert (
            binding.previous_principal.id == "anonymous" and binding.principal.id == "mia_li_3668"
        )
        assert call(session, "get_order_details", {"order_id": "#W2001"}).ok
        assert observer.ended[-1][0].step == 3  # counters carried over: one session throughout

    def test_a_second_lookup_cannot_switch_users(self, retail: RetailApp) -> None:
        """Once bound, a lookup naming someone else is refused and shows nothing."""
        session = retail.session("c")
        assert call(session, "find_user_id_by_name_zip", MIA).ok
        other = call(session, "find_user_id_by_email", {"email": "omar.ali@example.com"})
        assert other.code is Code.PERMISSION_DENIED and other.data is None
        assert session.principal.id == "mia_li_3668"

    def test_hosts_can_authenticate_themselves(self, retail: RetailApp) -> None:
        """Session.authenticate binds a principal the host identified; the next span records the change."""
        observer = retail.guard.observer
        assert isinstance(observer, RecordingObserver)
        session = retail.session("c")
        session.authenticate(Principal(id="omar_ali_1077", role="customer", scopes=CUSTOMER_SCOPES))
        assert call(session, "get_order_details", {"order_id": "#W3001"}).ok
        audited, _ = observer.ended[-1]
        assert (
            audited.previous_principal is not None and audited.previous_principal.id == "anonymous"
        )
        assert call(session, "get_order_details", {"order_id": "#W2001"}).code is Code.NOT_FOUND
        assert observer.ended[-1][0].previous_principal is None  # audited once


class TestPrerequisites:
    """Item 4: any one of several tools, values seen in earlier results, fields mapped by value."""

    def test_profile_needs_either_lookup(self, retail: RetailApp) -> None:
        """get_user_details after Session.authenticate but no lookup: call one of the two first."""
        session = retail.session("c")
        session.authenticate(Principal(id="mia_li_3668", role="customer", scopes=CUSTOMER_SCOPES))
        result = call(session, "get_user_details")
        assert result.code is Code.PREREQUISITE_MISSING
        assert "find_user_id_by_email or find_user_id_by_name_zip" in result.message

    def test_items_must_come_from_the_order_and_the_product(self, retail: RetailApp) -> None:
        """An item or variant id the session never saw is refused, pointing at the item."""
        session = identified(retail)
        result = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["TS-BLACK-L"]},
        )
        assert result.code is Code.PREREQUISITE_MISSING and result.fixable
        (problem,) = result.data["problems"]
        assert problem["path"] == "/new_item_ids/0" and problem["got"] == '"TS-BLACK-L"'
        assert "Call get_product_details first" in result.message
        assert retail.backend.side_effects == 0

    def test_a_payment_method_must_be_in_the_profile(self, retail: RetailApp) -> None:
        """A payment method id the profile did not list is refused."""
        session = identified(retail)
        result = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "payment_method_id": "paypal_5100"},
        )
        assert result.code is Code.PREREQUISITE_MISSING
        assert result.data["problems"][0]["path"] == "/payment_method_id"

    def test_the_order_must_have_been_read(self, retail: RetailApp) -> None:
        """An exchange on an order not read in this session names get_order_details and the order."""
        session = retail.session("c")
        call(session, "find_user_id_by_name_zip", MIA)
        result = call(session, "exchange_delivered_order_items", KEYBOARD_FOR_BLUE)
        assert result.code is Code.PREREQUISITE_MISSING
        assert "Call get_order_details for order_id=#W2001 first" in result.message


class TestDomainCodes:
    """Items 1 and 3: checks read ctx.deps and answer with the domain's own codes and problems."""

    def test_a_variant_of_another_product_is_a_list_of_problems(self, retail: RetailApp) -> None:
        """VARIANT_MISMATCH points at each offending item."""
        session = identified(retail)
        assert call(session, "get_product_details", {"product_id": "P-SHIRT"}).ok
        result = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["TS-BLACK-L"]},
        )
        assert result.code == "VARIANT_MISMATCH" and result.fixable
        (problem,) = result.data["problems"]
        assert (problem["path"], problem["rule"]) == ("/new_item_ids/0", "same_product")
        assert "a variant of P-KEYBOARD" in result.message

    def test_unavailable_and_balance(self, retail: RetailApp) -> None:
        """Out of stock, and a gift card too small for the difference: both fixable."""
        session = identified(retail)
        out = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["KB-BROWN-TKL"]},
        )
        assert out.code == "ITEM_UNAVAILABLE" and out.fixable
        low = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "payment_method_id": "gift_card_5412"},
        )
        assert low.code == "GIFT_CARD_BALANCE_LOW" and low.data == {
            "needed_cents": 500,
            "balance_cents": 300,
        }
        assert retail.backend.side_effects == 0

    def test_fixable_is_decided_per_refusal(self, retail: RetailApp) -> None:
        """A closed account with no other method is not fixable, though the code usually is."""
        session = retail.session("omar")
        assert call(session, "find_user_id_by_email", {"email": "omar.ali@example.com"}).ok
        assert call(session, "get_user_details").ok
        assert call(session, "get_order_details", {"order_id": "#W3001"}).ok
        result = call(
            session,
            "return_delivered_order_items",
            {"order_id": "#W3001", "item_ids": ["TS-BLACK-L"], "payment_method_id": "paypal_5100"},
        )
        assert result.code == "PAYMENT_METHOD_UNUSABLE" and not result.fixable
        assert "do not retry" in result.message

    def test_deps_keep_two_stores_apart(self) -> None:
        """Two guards over two stores: each check and handler reads its own through ctx.deps."""
        first, second = build_retail(clock=ManualClock()), build_retail(clock=ManualClock())
        second.backend.orders["#W2001"].status = "cancelled"
        assert call(identified(first), "exchange_delivered_order_items", KEYBOARD_FOR_BLUE).ok
        assert (
            call(identified(second), "exchange_delivered_order_items", KEYBOARD_FOR_BLUE).code
            is Code.INVALID_STATE
        )
        assert (first.backend.side_effects, second.backend.side_effects) == (1, 0)

    def test_the_codes_command_lists_the_domain_codes(self) -> None:
        """callgate codes --app lists every retail code with its stage, fixable flag and advice."""
        output = CliRunner().invoke(
            main, ["codes", "--app", "examples.retail:replay_target", "--domain", "--json"]
        )
        assert output.exit_code == 0, output.output
        rows = [json.loads(line) for line in output.output.splitlines()]
        assert [row["code"] for row in rows] == [str(code) for code in RETAIL_CODES]
        assert {row["origin"] for row in rows} == {"domain"}


class TestWarningsAndErrors:
    """Items 5 and 7: advice that lets a call through; cross-field rules the model can act on."""

    def test_same_variant_goes_through_with_a_warning(self, retail: RetailApp) -> None:
        """The exchange runs once; the model reads SAME_ITEM with the result."""
        session = identified(retail)
        arguments = {**KEYBOARD_FOR_BLUE, "new_item_ids": ["KB-RED-FULL"]}
        result = call(session, "exchange_delivered_order_items", arguments)
        assert result.ok and [str(w.code) for w in result.warnings] == ["SAME_ITEM"]
        assert result.for_model()["warnings"][0]["code"] == "SAME_ITEM"
        assert retail.backend.side_effects == 1

    def test_one_new_item_per_item(self, retail: RetailApp) -> None:
        """The model_validator's rule is the message, and it is in the tool's description."""
        session = identified(retail)
        result = call(
            session, "exchange_delivered_order_items", {**KEYBOARD_FOR_BLUE, "new_item_ids": []}
        )
        assert result.code is Code.INVALID_ARGUMENTS
        assert "must not be empty" in result.message and "characters" not in result.message
        two = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["KB-BLUE-FULL", "KB-RED-FULL"]},
        )
        assert "the arguments: new_item_ids needs one entry per entry of item_ids" in two.message
        spec = retail.guard.registry["exchange_delivered_order_items"]
        assert "new_item_ids has one entry per entry of item_ids" in spec.model_description


class TestApprovalsAndTurns:
    """Items 8 and 9: a human is asked once per pending action; hosts that never mark turns."""

    def test_needs_human_only_while_a_decision_is_pending(self, retail: RetailApp) -> None:
        """CONFIRMATION_REQUIRED needs a human; the approved result and its replay do not."""
        session = identified(retail)
        arguments = {
            "order_id": "#W2001",
            "item_ids": ["TS-BLACK-M"],
            "payment_method_id": "credit_card_9231",
        }
        pending = call(session, "return_delivered_order_items", arguments)
        assert pending.code is Code.CONFIRMATION_REQUIRED and pending.needs_human
        assert pending.approval_id is not None
        done = retail.guard.approve(pending.approval_id, by="agent-7")
        assert done.ok and done.approval_id == pending.approval_id and not done.needs_human
        again = call(session, "return_delivered_order_items", arguments)
        assert (
            again.ok and again.replayed and again.approval_id is not None and not again.needs_human
        )
        assert retail.backend.side_effects == 1

    def test_a_host_that_never_marks_turns_gets_the_session_ceiling(self) -> None:
        """Without next_turn only max_steps_per_session applies, however low the turn ceiling."""
        retail = build_retail(
            clock=ManualClock(), policy=retail_policy(max_steps_per_turn=3, rate_limit=None)
        )
        session = identified(retail)  # four calls, more than the turn allows
        assert call(session, "get_user_details").ok
        session.next_turn()
        results = [
            call(session, "get_order_details", {"order_id": "#W2001"}).code for _ in range(4)
        ]
        assert (
            results[:3] == [Code.OK, Code.OK, Code.LOOP_DETECTED] and results[3] is Code.STEP_LIMIT
        )


class TestShadowMode:
    """Item 6: a guard in shadow mode records what it would have decided and runs the call."""

    def test_shadow_runs_what_enforcement_would_refuse(self) -> None:
        """VARIANT_MISMATCH is recorded, the exchange runs as without the gate, the result says shadow."""
        retail = build_retail(clock=ManualClock(), observer=RecordingObserver(), shadow=True)
        session = identified(retail)
        assert call(session, "get_product_details", {"product_id": "P-SHIRT"}).ok
        result = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["TS-BLACK-L"]},
        )
        assert result.ok and result.shadow == "VARIANT_MISMATCH"
        assert retail.backend.side_effects == 1
        observer = retail.guard.observer
        assert isinstance(observer, RecordingObserver)
        recorded, _ = observer.ended[-1]
        assert recorded.shadow == "VARIANT_MISMATCH" and recorded.shadow_stage == "rules"

    def test_shadow_never_asks_a_human(self) -> None:
        """A write that would wait for approval runs at once in shadow mode; no approval is created."""
        retail = build_retail(clock=ManualClock(), shadow=True)
        session = identified(retail)
        arguments = {
            "order_id": "#W2001",
            "item_ids": ["TS-BLACK-M"],
            "payment_method_id": "credit_card_9231",
        }
        result = call(session, "return_delivered_order_items", arguments)
        assert (
            result.ok and result.shadow is Code.CONFIRMATION_REQUIRED and result.approval_id is None
        )
        assert retail.backend.side_effects == 1

    def test_invalid_arguments_are_answered_even_in_shadow(self) -> None:
        """Nothing to run without valid arguments: the model gets INVALID_ARGUMENTS as without the gate."""
        retail = build_retail(clock=ManualClock(), shadow=True)
        result = call(identified(retail), "exchange_delivered_order_items", {"order_id": "W1"})
        assert result.code is Code.INVALID_ARGUMENTS and result.shadow is None

    def test_one_tool_in_shadow(self) -> None:
        """Shadow per tool: the others are enforced."""
        retail = build_retail(clock=ManualClock(), shadow=frozenset({"cancel_pending_order"}))
        session = identified(retail)
        enforced = call(
            session,
            "exchange_delivered_order_items",
            {**KEYBOARD_FOR_BLUE, "new_item_ids": ["KB-BROWN-TKL"]},
        )
        assert enforced.code == "ITEM_UNAVAILABLE" and enforced.shadow is None
        cancelled = call(
            session, "cancel_pending_order", {"order_id": "#W2001", "reason": "no longer needed"}
        )
        assert (
            cancelled.ok and cancelled.shadow is Code.INVALID_STATE
        )  # delivered: would be refused
        assert (
            retail.backend.side_effects == 1
            and retail.backend.orders["#W2001"].status == "cancelled"
        )


class TestTheDocument:
    """docs/domains.md shows the example's real code."""

    def test_every_excerpt_is_in_its_file(self) -> None:
        """A code block headed with a file name appears in that file, word for word (spacing aside)."""
        import re
        from pathlib import Path

        root = Path(__file__).resolve().parents[2]
        text = (root / "docs" / "domains.md").read_text()
        blocks = re.findall(r"```python\n# (examples/\S+)\n(.*?)```", text, flags=re.DOTALL)
        assert len(blocks) >= 10
        for path, block in blocks:
            source = " ".join((root / path).read_text().split())
            assert " ".join(block.split()) in source, (path, block)

    def test_the_quoted_messages_are_the_real_ones(self, retail: RetailApp) -> None:
        """The messages the page quotes are what the model reads."""
        from pathlib import Path

        text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "domains.md").read_text().split())
        anonymous = call(retail.session("c"), "get_order_details", {"order_id": "#W2001"})
        assert anonymous.message in text
        session = identified(retail)
        assert call(session, "get_product_details", {"product_id": "P-SHIRT"}).ok
        mismatch = call(session, "exchange_delivered_order_items", {**KEYBOARD_FOR_BLUE, "new_item_ids": ["TS-BLACK-L"]})
        assert mismatch.message in text
        fresh = identified(build_retail(clock=ManualClock()))
        unseen = call(fresh, "exchange_delivered_order_items", {**KEYBOARD_FOR_BLUE, "new_item_ids": ["TS-BLACK-L"]})
        assert unseen.message in text
