"""Stage 0: step limits, rate limits and the validation-failure budget."""

from __future__ import annotations

from guard import RateLimit
from guard.stages.budget import _SESSIONS
from guard.testing import ManualClock
from tests.guard.conftest import make_shop, order_args


class TestStepLimit:
    def test_session_ceiling(self, clock: ManualClock) -> None:
        """Calls beyond the session's step limit are refused with STEP_LIMIT and never run."""
        shop = make_shop(clock, max_steps_per_session=3, max_steps_per_turn=100, rate_limit=None)
        session = shop.session("s1", "CUS-1")
        codes = []
        for order_id in ("ORD-1001", "ORD-1003", "ORD-1004", "ORD-1001", "ORD-1003"):  # CUS-1's
            session.next_turn()
            codes.append(session.execute("get_order", order_args(order_id)).code)
        assert codes[3:] == ["STEP_LIMIT", "STEP_LIMIT"]
        assert shop.backend.requests == 3

    def test_turn_ceiling_resets_on_next_turn(self, clock: ManualClock) -> None:
        """The per-turn ceiling refuses within a turn and starts again on the next user message."""
        shop = make_shop(clock, max_steps_per_turn=2, max_identical_calls=10, rate_limit=None)
        session = shop.session("s1", "CUS-1")
        session.next_turn()  # the first user message: marks turns, still turn 1
        assert session.turn == 1
        first = [session.execute("get_order", order_args()).code for _ in range(3)]
        session.next_turn()
        after = session.execute("get_order", order_args()).code
        assert first == ["OK", "OK", "STEP_LIMIT"]
        assert (after, session.turn) == ("OK", 2)

    def test_unmarked_sessions_get_the_session_ceiling_only(self, clock: ManualClock) -> None:
        """A host that never calls next_turn is not cut short by the per-turn ceiling."""
        shop = make_shop(clock, max_steps_per_turn=2, max_identical_calls=10, rate_limit=None)
        session = shop.session("s1", "CUS-1")
        codes = {session.execute("get_order", order_args()).code for _ in range(6)}
        assert codes == {"OK"}

    def test_a_rebuilt_handle_passes_its_turn(self, clock: ManualClock) -> None:
        """Hosts that rebuild the session per request pass the turn; the ceiling then applies."""
        shop = make_shop(clock, max_steps_per_turn=2, max_identical_calls=10, rate_limit=None)
        principal = shop.session("s1", "CUS-1").principal
        codes = [
            shop.guard.session("s1", principal, turn=4).execute("get_order", order_args()).code
            for _ in range(3)
        ]
        assert codes == ["OK", "OK", "STEP_LIMIT"]

    def test_rejected_calls_count_as_steps(self, clock: ManualClock) -> None:
        """A model that keeps failing still burns its budget."""
        shop = make_shop(clock, max_steps_per_session=2, max_invalid_in_a_row=100, rate_limit=None)
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", "{bad")
        session.execute("get_order", "{bad")
        assert session.execute("get_order", order_args()).code == "STEP_LIMIT"
        assert shop.backend.requests == 0

    def test_ceilings_hold_past_the_sessions_the_stage_keeps(self, clock: ManualClock) -> None:
        """The stage keeps a bounded number of sessions' ceilings built; a session it forgot in
        between is still counted from where it was, never from zero."""
        shop = make_shop(clock, max_steps_per_session=2, max_identical_calls=10, rate_limit=None)
        first = shop.session("s-first", "CUS-1")
        assert first.execute("get_order", order_args()).ok
        for i in range(_SESSIONS + 1):  # more sessions than it keeps: "s-first" is forgotten
            shop.session(f"s{i}", "CUS-1").execute("get_order", "{bad")
        codes = [first.execute("get_order", order_args()).code for _ in range(2)]
        assert codes == ["OK", "STEP_LIMIT"]
        assert shop.backend.requests == 2


class TestRateLimit:
    def test_rate_limited_within_window(self, clock: ManualClock) -> None:
        """More calls than the window allows get RATE_LIMITED; the next window admits calls again."""
        shop = make_shop(clock, rate_limit=RateLimit(calls=2, seconds=1.0), max_identical_calls=10)
        session = shop.session("s1", "CUS-1")
        codes = [session.execute("get_order", order_args()).code for _ in range(3)]
        clock.advance(1.0)
        later = session.execute("get_order", order_args()).code
        assert codes == ["OK", "OK", "RATE_LIMITED"]
        assert later == "OK"

    def test_sessions_are_limited_separately(self, clock: ManualClock) -> None:
        """One busy session does not rate-limit another."""
        shop = make_shop(clock, rate_limit=RateLimit(calls=1, seconds=1.0))
        one, two = shop.session("s1", "CUS-1"), shop.session("s2", "CUS-1")
        assert one.execute("get_order", order_args()).ok
        assert one.execute("get_order", order_args()).code == "RATE_LIMITED"
        assert two.execute("get_order", order_args()).ok


class TestValidationBudget:
    def test_hand_over_after_consecutive_invalid_calls(self, clock: ManualClock) -> None:
        """After N invalid calls in a row the model is told to stop and hand over."""
        shop = make_shop(clock, max_invalid_in_a_row=3)
        session = shop.session("s1", "CUS-1")
        codes = [
            session.execute("get_order", "{bad").code,
            session.execute("get_order", '{"order_id": 1001}').code,
            session.execute("no_such_tool", "{}").code,
            session.execute("get_order", order_args()).code,
        ]
        result = session.execute("get_order", order_args())
        assert codes == [
            "INVALID_JSON",
            "INVALID_ARGUMENTS",
            "UNKNOWN_TOOL",
            "VALIDATION_BUDGET_EXHAUSTED",
        ]
        assert result.code == "VALIDATION_BUDGET_EXHAUSTED"
        assert "human" in result.message
        assert shop.backend.requests == 0

    def test_a_valid_call_resets_the_streak(self, clock: ManualClock) -> None:
        """Invalid calls separated by a valid one never exhaust the budget."""
        shop = make_shop(clock, max_invalid_in_a_row=2, max_identical_calls=10)
        session = shop.session("s1", "CUS-1")
        codes = []
        for _ in range(3):
            codes.append(session.execute("get_order", "{bad").code)
            codes.append(session.execute("get_order", order_args()).code)
        assert codes == ["INVALID_JSON", "OK"] * 3
