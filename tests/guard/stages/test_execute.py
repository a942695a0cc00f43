"""Stage 8: timeouts, bounded retries with the same key, unknown outcomes, internal errors."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import (
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
from guard.testing import ManualClock
from tests.guard.conftest import approved_refund, order_args


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


def guard_with(*specs: Any, clock: ManualClock) -> Any:
    policy = Policy(
        roles={"user": RolePolicy(tools=frozenset(s.name for s in specs))}, rate_limit=None
    )
    guard = Guard(tools=specs, policy=policy, clock=clock)
    return guard.session("s1", Principal(id="U-1", role="user"))


class TestRetries:
    def test_commit_then_lost_response_is_retried_without_a_second_refund(
        self, shop: ShopApp
    ) -> None:
        """The refund commits, the answer is lost; the retry with the same key gets the first refund."""
        shop.backend.inject("lose_next_response")
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        shop.backend.inject("lose_next_response")
        result = approved_refund(shop, "s1")
        assert result.ok
        assert shop.backend.side_effects == 1
        assert shop.backend.orders["ORD-1001"].refunded_cents == 2590

    def test_transient_errors_are_retried_with_backoff(
        self, shop: ShopApp, clock: ManualClock
    ) -> None:
        """Two 503s then success: three attempts, two backoff sleeps, one refund, retries reported."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        shop.backend.inject("transient", 2)
        result = approved_refund(shop, "s1")
        assert result.ok and shop.backend.side_effects == 1
        assert len(clock.slept) == 2
        assert all(0 <= delay <= 1.0 for delay in clock.slept)

    def test_a_read_that_keeps_failing(self, shop: ShopApp) -> None:
        """Transient failures on every attempt end UPSTREAM_UNAVAILABLE, outcome not applied."""
        shop.backend.inject("transient", 10)
        result = shop.session("s1", "CUS-1").execute("get_order", order_args())
        assert result.code == "UPSTREAM_UNAVAILABLE"
        assert result.outcome == "not_applied"
        assert shop.backend.requests == 3

    def test_write_with_unknown_outcome(self, shop: ShopApp) -> None:
        """Every attempt of a write times out after committing: TIMEOUT, outcome unknown, the key given."""
        session = shop.session("s1", "CUS-1")
        session.execute("get_order", order_args())
        pending = session.execute(
            "refund_order",
            '{"order_id":"ORD-1001","amount_cents":100,"currency":"BRL","reason":"damaged"}',
        )
        shop.backend.inject("lose_next_response", 3)
        assert pending.approval_id is not None
        result = shop.guard.approve(pending.approval_id, by="h")
        assert result.code == "TIMEOUT"
        assert result.outcome == "unknown"
        assert result.idempotency_key is not None
        assert result.for_model()["outcome"] == "unknown"
        assert shop.backend.side_effects == 1  # the backend deduplicated every retry

    def test_business_rejections_are_never_retried(self, clock: ManualClock) -> None:
        """A refusal from the backend is final after one attempt."""
        from guard import Code, RuleViolation

        attempts: list[int] = []

        @tool(arguments=Note, effect=Effect.WRITE)
        def save(args: Note, ctx: ToolContext) -> None:
            """Save a note."""
            attempts.append(ctx.attempt)
            raise RuleViolation(Code.INVALID_STATE, "closed")

        result = guard_with(save, clock=clock).execute("save", '{"text": "x"}')
        assert result.code == "INVALID_STATE" and attempts == [1]

    def test_backend_refusal_is_final_and_changes_nothing(self, shop: ShopApp) -> None:
        """The processor refusing a refund ends UPSTREAM_REJECTED after one attempt, nothing applied."""
        shop.backend.orders["ORD-1001"].disputed = True
        before = shop.backend.requests
        result = approved_refund(shop)
        assert result.code == "UPSTREAM_REJECTED" and result.outcome == "not_applied"
        assert shop.backend.side_effects == 0
        assert shop.backend.requests - before == 2  # the get_order and one refund attempt

    def test_same_key_on_every_attempt(self, clock: ManualClock) -> None:
        """Every retry of a write sends the backend the same idempotency key."""
        keys: list[str | None] = []

        @tool(arguments=Note, effect=Effect.WRITE, retry=RetryPolicy(attempts=4))
        def save(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Save a note."""
            keys.append(ctx.idempotency_key)
            if len(keys) < 4:
                raise TransientError("503")
            return {"saved": args.text}

        result = guard_with(save, clock=clock).execute("save", '{"text": "x"}')
        assert result.ok and len(keys) == 4 and len(set(keys)) == 1 and keys[0]

    def test_non_idempotent_backend_is_not_retried_after_a_timeout(
        self, clock: ManualClock
    ) -> None:
        """When the backend cannot deduplicate, a timed-out write is not retried, and a repeat replays TIMEOUT."""
        runs: list[int] = []

        @tool(arguments=Note, effect=Effect.WRITE, idempotent_backend=False)
        def save(args: Note, ctx: ToolContext) -> None:
            """Save a note."""
            runs.append(ctx.attempt)
            raise TimeoutError

        session = guard_with(save, clock=clock)
        first = session.execute("save", '{"text": "x"}')
        second = session.execute("save", '{"text": "x"}')
        assert first.code == "TIMEOUT" and first.outcome == "unknown"
        assert second.replayed and second.code == "TIMEOUT"
        assert runs == [1]


class TestFailures:
    def test_unexpected_exception_is_internal_error(
        self, clock: ManualClock, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A bug in a handler is logged with its traceback; the model gets INTERNAL_ERROR without internals."""

        @tool(arguments=Note)
        def broken(args: Note, ctx: ToolContext) -> None:
            """Break."""
            raise KeyError("db_password=hunter2")

        with caplog.at_level(logging.ERROR, logger="guard"):
            result = guard_with(broken, clock=clock).execute("broken", '{"text": "x"}')
        assert result.code == "INTERNAL_ERROR"
        assert "hunter2" not in result.message and "KeyError" not in result.message
        assert any(record.exc_info for record in caplog.records)

    def test_result_model_drops_fields(self, shop: ShopApp) -> None:
        """The back office's agent_note never reaches the model; as_of does."""
        result = shop.session("s1", "CUS-1").execute("get_order", order_args())
        assert result.data is not None
        assert "agent_note" not in result.data and "customer_id" not in result.data
        assert result.data["as_of"].startswith("2026-01-01")

    def test_slow_backend_times_out(self, clock: ManualClock) -> None:
        """A coroutine handler past its timeout is cancelled; a read then ends UPSTREAM_UNAVAILABLE."""

        @tool(arguments=Note, timeout=0.01, retry=RetryPolicy(attempts=2, base_delay=0))
        async def slow(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Be slow."""
            await asyncio.sleep(1)
            return {}

        result = guard_with(slow, clock=clock).execute("slow", '{"text": "x"}')
        assert result.code == "UPSTREAM_UNAVAILABLE"


class TestAsync:
    def test_aexecute_runs_coroutine_handlers(self, clock: ManualClock) -> None:
        """The async twin awaits coroutine handlers on the caller's loop and gives the same result."""

        @tool(arguments=Note)
        async def echo(args: Note, ctx: ToolContext) -> dict[str, str]:
            """Echo."""
            await asyncio.sleep(0)
            return {"text": args.text}

        session = guard_with(echo, clock=clock)
        result = asyncio.run(session.aexecute("echo", '{"text": "hi"}', call_id="c1"))
        assert result.ok and result.data == {"text": "hi"} and result.call_id == "c1"

    def test_aexecute_times_out_a_write_as_unknown(self, clock: ManualClock) -> None:
        """A coroutine write cancelled at its timeout on every attempt ends TIMEOUT, outcome unknown."""

        @tool(
            arguments=Note,
            effect=Effect.WRITE,
            risk=Risk.LOW,
            timeout=0.01,
            retry=RetryPolicy(attempts=2, base_delay=0),
        )
        async def save(args: Note, ctx: ToolContext) -> None:
            """Save slowly."""
            await asyncio.sleep(1)

        session = guard_with(save, clock=clock)
        result = asyncio.run(session.aexecute("save", '{"text": "x"}'))
        assert result.code == "TIMEOUT" and result.outcome == "unknown"


class TestLeases:
    def test_a_write_that_could_outlive_its_claim_is_refused(self, clock: ManualClock) -> None:
        """A write whose timeouts and retries could outlast the claim lease fails at build time."""
        from guard import ConfigurationError

        @tool(arguments=Note, effect=Effect.WRITE, timeout=30.0, retry=RetryPolicy(attempts=3))
        def slow_write(args: Note, ctx: ToolContext) -> None:
            """Write slowly."""

        with pytest.raises(ConfigurationError, match="claim lease"):
            guard_with(slow_write, clock=clock)

    def test_a_write_without_timeout_is_refused(self, clock: ManualClock) -> None:
        """A write with no timeout could hold its claim forever: refused at build time."""
        from guard import ConfigurationError

        @tool(arguments=Note, effect=Effect.WRITE, timeout=None)
        def unbounded(args: Note, ctx: ToolContext) -> None:
            """Write forever."""

        with pytest.raises(ConfigurationError, match="timeout"):
            guard_with(unbounded, clock=clock)
