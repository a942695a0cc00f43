"""Fixtures for the guard's tests: the shop on a manual clock, and helpers to drive it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from guard import Guard, Policy, ToolResult
from guard.shop import ShopApp, build_shop, shop_policy
from guard.testing import ManualClock, RecordingObserver


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
def shop(clock: ManualClock, observer: RecordingObserver) -> ShopApp:
    return build_shop(clock=clock, observer=observer)


def make_shop(clock: ManualClock, **policy: Any) -> ShopApp:
    """A shop with policy settings changed."""
    return build_shop(clock=clock, policy=shop_policy(**policy))


def refund_args(
    order_id: str = "ORD-1001",
    amount_cents: Any = 2590,
    currency: str = "BRL",
    reason: str = "damaged",
    **extra: Any,
) -> str:
    return json.dumps(
        {"order_id": order_id, "amount_cents": amount_cents, "currency": currency, "reason": reason}
        | extra
    )


def order_args(order_id: str = "ORD-1001") -> str:
    return json.dumps({"order_id": order_id})


def approved_refund(shop: ShopApp, session_id: str = "s1", **kwargs: Any) -> ToolResult:
    """get_order, propose the refund, and have a human approve it."""
    session = shop.session(session_id, "CUS-1")
    order_id = kwargs.get("order_id", "ORD-1001")
    assert session.execute("get_order", order_args(order_id)).ok
    pending = session.execute("refund_order", refund_args(**kwargs), call_id="c-refund")
    assert pending.code == "CONFIRMATION_REQUIRED", pending
    assert pending.approval_id is not None
    return shop.guard.approve(pending.approval_id, by="agent-7")


def guard_of(shop: ShopApp) -> Guard:
    return shop.guard


def policy_of(shop: ShopApp) -> Policy:
    return shop.guard.policy
