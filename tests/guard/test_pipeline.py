"""The runner: one loop over the stages, driven by blocking or on an event loop, with one outcome rule."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import (
    ApprovalNotFound,
    Effect,
    Guard,
    Policy,
    Principal,
    RetryPolicy,
    Risk,
    RolePolicy,
    ToolContext,
    TransientError,
    tool,
)
from guard.shop import ShopApp
from guard.testing import ManualClock, RecordingObserver
from tests.guard.conftest import order_args, refund_args


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


def propose(shop: ShopApp) -> str:
    session = shop.session("s1", "CUS-1")
    assert session.execute("get_order", order_args()).ok
    pending = session.execute("refund_order", refund_args())
    assert pending.code == "CONFIRMATION_REQUIRED" and pending.approval_id is not None
    return pending.approval_id


def records(observer: RecordingObserver) -> list[tuple[str, str, str | None]]:
    return [(r.name, r.outcome, r.code) for _, r in observer.stages]


def flaky_guard(clock: ManualClock, observer: RecordingObserver) -> tuple[Guard, list[str]]:
    """A coroutine write that fails once with a transient error, then succeeds."""
    ran: list[str] = []

    @tool(
        arguments=Note,
        effect=Effect.WRITE,
        risk=Risk.LOW,
        timeout=1.0,
        retry=RetryPolicy(attempts=3, base_delay=0.5, jitter=False),
    )
    async def save(args: Note, ctx: ToolContext) -> dict[str, Any]:
        """Save a note."""
        await asyncio.sleep(0)
        if ctx.attempt == 1:
            raise TransientError("503")
        ran.append(args.text)
        return {"saved": args.text}

    policy = Policy(roles={"user": RolePolicy(tools=frozenset({"save"}))}, rate_limit=None)
    return Guard(tools=[save], policy=policy, clock=clock, observer=observer), ran


class TestOneLoop:
    def test_sync_and_async_report_the_same_stages(
        self, clock: ManualClock, observer: RecordingObserver
    ) -> None:
        """The same call through execute and aexecute passes the same stages with the same outcomes."""
        guard, ran = flaky_guard(clock, observer)
        user = Principal(id="U-1", role="user")
        sync = guard.session("s-sync", user).execute("save", '{"text": "a"}')
        sync_records = records(observer)
        observer.stages.clear()
        async_ = asyncio.run(guard.session("s-async", user).aexecute("save", '{"text": "a"}'))
        assert sync.ok and async_.ok and ran == ["a", "a"]
        assert records(observer) == sync_records
        assert sync_records[-1] == ("execute", "final", "OK")
        assert [outcome for _, outcome, _ in sync_records[:-1]] == ["pass"] * 8

    def test_backoff_waits_on_the_clock_in_both_drivers(
        self, clock: ManualClock, observer: RecordingObserver
    ) -> None:
        """A retried attempt sleeps (sync) or awaits the clock (async) for the same backoff."""
        guard, _ = flaky_guard(clock, observer)
        user = Principal(id="U-1", role="user")
        guard.session("s1", user).execute("save", '{"text": "a"}')
        asyncio.run(guard.session("s2", user).aexecute("save", '{"text": "b"}'))
        assert clock.slept == [0.5, 0.5]
        assert [retry.attempt for _, retry in observer.retries] == [1, 1]

    def test_a_coroutine_handler_runs_on_the_callers_loop(self, clock: ManualClock) -> None:
        """aexecute awaits a coroutine handler on the running loop, not a loop of its own."""
        loops: list[asyncio.AbstractEventLoop] = []

        @tool(arguments=Note)
        async def where(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Say where it ran."""
            loops.append(asyncio.get_running_loop())
            return {"text": args.text}

        policy = Policy(roles={"user": RolePolicy(tools=frozenset({"where"}))}, rate_limit=None)
        session = Guard(tools=[where], policy=policy, clock=clock).session(
            "s1", Principal(id="U-1", role="user")
        )

        async def host() -> asyncio.AbstractEventLoop:
            assert (await session.aexecute("where", '{"text": "x"}')).ok
            return asyncio.get_running_loop()

        assert loops == [asyncio.run(host())]

    def test_a_stage_that_raises_ends_internal_error_in_both_drivers(self, shop: ShopApp) -> None:
        """A bug in a stage is INTERNAL_ERROR with nothing run, whichever driver ran the loop."""

        def broken(call: Any) -> None:
            raise RuntimeError("bug")

        guard = shop.guard
        guard.stages[5] = broken  # type: ignore[call-overload]
        setattr(broken, "name", "rules")  # noqa: B010
        session = shop.session("s1", "CUS-1")
        sync = session.execute("get_order", order_args())
        async_ = asyncio.run(session.aexecute("get_order", order_args()))
        assert sync.code == async_.code == "INTERNAL_ERROR"
        assert shop.backend.side_effects == 0


class TestAsyncDecisions:
    def test_aapprove_runs_the_write_once(self, shop: ShopApp) -> None:
        """An approval decided from async code runs the refund exactly once; a second one replays."""
        approval_id = propose(shop)
        first = asyncio.run(shop.guard.aapprove(approval_id, by="agent-7"))
        again = asyncio.run(shop.guard.aapprove(approval_id, by="agent-7"))
        assert first.ok and first.approval_id == approval_id
        assert again.ok and again.replayed
        assert shop.backend.side_effects == 1
        assert shop.backend.orders["ORD-1001"].refunded_cents == 2590

    def test_adeny_runs_nothing(self, shop: ShopApp) -> None:
        """A denial from async code ends CONFIRMATION_DENIED and a later approval cannot run it."""
        approval_id = propose(shop)
        denied = asyncio.run(shop.guard.adeny(approval_id, by="agent-7"))
        late = asyncio.run(shop.guard.aapprove(approval_id, by="agent-8"))
        assert denied.code == late.code == "CONFIRMATION_DENIED"
        assert not denied.ok and denied.approval_id == approval_id
        assert shop.backend.side_effects == 0

    def test_adeny_of_an_unknown_approval_raises(self, shop: ShopApp) -> None:
        """The host named an id the store does not know: that is the host's bug, so it raises."""
        with pytest.raises(ApprovalNotFound):
            asyncio.run(shop.guard.adeny("apr_nope", by="agent-7"))
        assert shop.backend.side_effects == 0

    def test_aapprove_awaits_a_coroutine_write(
        self, clock: ManualClock, observer: RecordingObserver
    ) -> None:
        """An approved coroutine write is awaited (with its retry) and runs once."""
        ran: list[str] = []

        @tool(
            arguments=Note,
            effect=Effect.WRITE,
            risk=Risk.HIGH,
            timeout=1.0,
            retry=RetryPolicy(attempts=2, base_delay=0.25, jitter=False),
        )
        async def publish(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Publish a note."""
            await asyncio.sleep(0)
            if ctx.attempt == 1:
                raise ConnectionError("reset")
            ran.append(args.text)
            return {"text": args.text}

        policy = Policy(roles={"user": RolePolicy(tools=frozenset({"publish"}))}, rate_limit=None)
        guard = Guard(tools=[publish], policy=policy, clock=clock, observer=observer)
        pending = guard.session("s1", Principal(id="U-1", role="user")).execute(
            "publish", '{"text": "hi"}'
        )
        assert pending.code == "CONFIRMATION_REQUIRED" and pending.approval_id is not None
        assert ran == []
        result = asyncio.run(guard.aapprove(pending.approval_id, by="agent-7"))
        assert result.ok and ran == ["hi"] and clock.slept == [0.25]


def cancellable_guard(
    clock: ManualClock, *, dedupes: bool, observer: RecordingObserver | None = None
) -> tuple[Guard, list[str]]:
    """A coroutine write that records its side effect, then waits long enough to be cancelled."""
    applied: list[str] = []

    @tool(arguments=Note, effect=Effect.WRITE, risk=Risk.LOW, idempotent_backend=dedupes)
    async def pay(args: Note, ctx: ToolContext) -> dict[str, str]:
        """Pay."""
        applied.append(ctx.idempotency_key or "")
        await asyncio.sleep(5)
        return {}

    policy = Policy(roles={"user": RolePolicy(tools=frozenset({"pay"}))}, rate_limit=None)
    return Guard(tools=[pay], policy=policy, clock=clock, observer=observer), applied


def cancel_mid_handler(guard: Guard) -> None:
    session = guard.session("s1", Principal(id="U-1", role="user"))

    async def host() -> None:
        task = asyncio.create_task(session.aexecute("pay", '{"text": "x"}'))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(host())


class TestInterrupted:
    def test_a_write_cancelled_mid_handler_never_runs_blindly_again(
        self, clock: ManualClock
    ) -> None:
        """A client that goes away mid-payment leaves an unknown outcome under the key, not a
        claim that goes stale: the repeat, even after the lease, replays TIMEOUT and pays nothing."""
        guard, applied = cancellable_guard(clock, dedupes=False)
        cancel_mid_handler(guard)
        clock.advance(guard.policy.claim_lease + 1)
        again = guard.session("s1", Principal(id="U-1", role="user")).execute(
            "pay", '{"text": "x"}'
        )
        assert again.code == "TIMEOUT" and again.outcome == "unknown" and again.replayed
        assert again.idempotency_key == applied[0] and len(applied) == 1

    def test_a_cancelled_write_the_backend_dedupes_may_run_again(self, clock: ManualClock) -> None:
        """With a backend that honours the key the claim is released: the retry runs, same key."""
        guard, applied = cancellable_guard(clock, dedupes=True)
        cancel_mid_handler(guard)
        session = guard.session("s1", Principal(id="U-1", role="user"))

        async def retry() -> str:
            task = asyncio.create_task(session.aexecute("pay", '{"text": "x"}'))
            await asyncio.sleep(0.05)
            task.cancel()
            return "cancelled"

        asyncio.run(retry())
        assert len(applied) == 2 and len(set(applied)) == 1

    def test_the_interrupted_call_still_ends(
        self, clock: ManualClock, observer: RecordingObserver
    ) -> None:
        """The observer sees the cancelled call end (TIMEOUT, at the execute stage)."""
        guard, _ = cancellable_guard(clock, dedupes=False, observer=observer)
        cancel_mid_handler(guard)
        [(call, result)] = observer.ended
        assert result.code == "TIMEOUT" and call.rejected_stage == "execute"
