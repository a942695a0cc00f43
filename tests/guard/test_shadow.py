"""Shadow mode on the shop: every stage runs, the would-be decision is recorded, the call runs."""

from __future__ import annotations

import pytest

from guard import Code, ConfigurationError, Guard
from guard.shop import build_shop, shop_policy
from guard.testing import ManualClock, RecordingObserver
from tests.guard.conftest import order_args, refund_args


def shadow_shop(clock: ManualClock, **policy: object) -> tuple[Guard, object, RecordingObserver]:
    observer = RecordingObserver()
    shop = build_shop(clock=clock, observer=observer, policy=shop_policy(**policy))
    guard = Guard(
        tools=shop.guard.registry.values(),
        policy=shop.guard.policy,
        clock=clock,
        observer=observer,
        shadow=True,
    )
    return guard, shop.backend, observer


class TestShadowMode:
    """Never silently: the result and the call record say shadow; nothing waits for a human."""

    def test_a_refund_over_the_limit_runs_and_says_what_would_have_happened(
        self, clock: ManualClock
    ) -> None:
        """POLICY_LIMIT is recorded, the refund runs once, no approval is created."""
        guard, backend, observer = shadow_shop(clock)
        session = guard.session("s1", build_shop().session("x", "CUS-1").principal)
        assert session.execute("get_order", order_args()).ok
        result = session.execute("refund_order", refund_args(amount_cents=11_000))
        assert result.ok and result.shadow is Code.POLICY_LIMIT and result.approval_id is None
        assert backend.side_effects == 1  # type: ignore[attr-defined]
        recorded, _ = observer.ended[-1]
        assert (recorded.shadow, recorded.shadow_stage) == (Code.POLICY_LIMIT, "policy")
        staged = [(r.name, r.outcome, r.code) for c, r in observer.stages if c is recorded]
        assert ("policy", "reject", Code.POLICY_LIMIT) in staged and staged[-1][0] == "execute"

    def test_a_read_loop_is_recorded_not_enforced(self, clock: ManualClock) -> None:
        """The fourth identical read runs; its result says LOOP_DETECTED would have stopped it."""
        guard, _, _ = shadow_shop(clock, rate_limit=None)
        session = guard.session("s1", build_shop().session("x", "CUS-1").principal)
        results = [session.execute("get_order", order_args()) for _ in range(4)]
        assert all(r.ok for r in results)
        assert [r.shadow for r in results] == [None, None, None, Code.LOOP_DETECTED]

    def test_a_repeated_write_stays_guarded(self, clock: ManualClock) -> None:
        """Writes keep their key: repeats replay, and a write loop stays enforced."""
        guard, backend, _ = shadow_shop(clock, rate_limit=None)
        session = guard.session("s1", build_shop().session("x", "CUS-1").principal)
        session.execute("get_order", order_args())
        codes = [session.execute("refund_order", refund_args()).code for _ in range(4)]
        assert codes == [Code.OK, Code.OK, Code.OK, Code.LOOP_DETECTED]
        assert backend.side_effects == 1  # type: ignore[attr-defined]

    def test_unknown_tools_and_invalid_arguments_are_answered(self, clock: ManualClock) -> None:
        """Nothing to run: the model gets the same answer as with enforcement."""
        guard, _, _ = shadow_shop(clock)
        session = guard.session("s1", build_shop().session("x", "CUS-1").principal)
        assert session.execute("refund_everything", "{}").code is Code.UNKNOWN_TOOL
        assert session.execute("get_order", '{"order_id": 5}').code is Code.INVALID_ARGUMENTS

    def test_shadow_names_must_be_tools(self) -> None:
        """A typo in the shadowed tools fails the build."""
        shop = build_shop()
        with pytest.raises(ConfigurationError, match="refund_ordre"):
            Guard(
                tools=shop.guard.registry.values(),
                policy=shop.guard.policy,
                shadow={"refund_ordre"},
            )
