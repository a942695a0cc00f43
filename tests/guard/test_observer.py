"""Every call reaches the observer, with the stages it ran; a broken observer never breaks a call."""

from __future__ import annotations

import logging

import pytest

from guard import Call, ToolResult
from guard.shop import ShopApp, build_shop
from guard.testing import ManualClock, RecordingObserver
from tests.guard.conftest import approved_refund, order_args

ORDER = [
    "budget",
    "resolve",
    "parse",
    "schema",
    "idempotency",
    "rules",
    "policy",
    "confirm",
    "execute",
]


class TestObserver:
    def test_every_call_reaches_the_observer(
        self, shop: ShopApp, observer: RecordingObserver
    ) -> None:
        """Each call, rejected or not, and each resumption, starts and ends once with its result."""
        session = shop.session("s1", "CUS-1")
        results = [
            session.execute("nope", "{}"),
            session.execute("get_order", "{bad"),
            session.execute("get_order", order_args()),
        ]
        results.append(approved_refund(shop, "s2"))
        assert len(observer.started) == len(observer.ended) == 3 + 3
        assert [r for _, r in observer.ended][:3] == results[:3]
        assert all(call.end_ns >= call.start_ns for call, _ in observer.ended)

    def test_stages_run_in_order_and_stop_at_the_rejection(
        self, shop: ShopApp, observer: RecordingObserver
    ) -> None:
        """Stage records follow the documented order and end with the stage that decided."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", '{"order_id": 1}')
        session.execute("get_order", order_args())
        rejected, ok = (call for call, _ in observer.ended)
        assert [s.name for s in rejected.stages] == ORDER[:4]
        assert (
            rejected.stages[-1].outcome == "reject"
            and rejected.stages[-1].code == "INVALID_ARGUMENTS"
        )
        assert rejected.rejected_stage == "schema"
        assert [s.name for s in ok.stages] == ORDER
        assert ok.stages[-1].outcome == "final" and ok.rejected_stage is None
        assert [name for _, name in observer.stage_starts][:4] == ORDER[:4]

    def test_resumed_call_records_its_decision(
        self, shop: ShopApp, observer: RecordingObserver
    ) -> None:
        """The resumption after approval skips the budget and carries the approval and decision."""
        approved_refund(shop)
        call, result = observer.ended[-1]
        assert result.ok and call.approval is not None and call.decision == "approved"
        assert call.confirmed and [s.name for s in call.stages] == ORDER[1:]

    def test_retries_are_reported(self, shop: ShopApp, observer: RecordingObserver) -> None:
        """Each retry of a transient failure reaches the observer."""
        shop.backend.inject("transient", 2)
        shop.session("s1", "CUS-1").execute("get_order", order_args())
        assert [r.attempt for _, r in observer.retries] == [1, 2]
        assert all(r.error == "TransientError" for _, r in observer.retries)

    def test_a_broken_observer_never_breaks_a_call(self, caplog: pytest.LogCaptureFixture) -> None:
        """An observer that raises is logged; the call still runs and answers."""

        class Broken(RecordingObserver):
            def call_ended(self, call: Call, result: ToolResult) -> None:
                raise RuntimeError("exporter down")

        shop = build_shop(clock=ManualClock(), observer=Broken())
        with caplog.at_level(logging.ERROR, logger="guard"):
            result = shop.session("s1", "CUS-1").execute("get_order", order_args())
        assert result.ok
        assert "observer failed" in caplog.text

    def test_untrusted_text_is_handed_to_observers(
        self, shop: ShopApp, observer: RecordingObserver
    ) -> None:
        """The text of an untrusted result is on the call record for telemetry to scan."""
        shop.session("s1", "CUS-1").execute("search_refund_policy", '{"query": "partial refunds"}')
        call, _ = observer.ended[-1]
        assert any("ignore previous instructions" in text for text in call.untrusted_text)
