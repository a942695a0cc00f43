"""The retail scenario through real telemetry: a trail of span files to read and to load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from examples.retail import build_retail
from guard import Session, ToolResult
from guard.testing import ManualClock
from telemetry import configure

KEY = "retail-test-key"

MIA = {"first_name": "Mia", "last_name": "Li", "zip": "94110"}
EXCHANGE = {
    "order_id": "#W2001",
    "item_ids": ["KB-RED-FULL"],
    "new_item_ids": ["KB-BLUE-FULL"],
    "payment_method_id": "credit_card_9231",
}


def call(session: Session, tool: str, arguments: dict[str, Any] | None = None) -> ToolResult:
    return session.execute(tool, json.dumps(arguments or {}))


def _identified(session: Session) -> Session:
    assert call(session, "find_user_id_by_name_zip", MIA).ok
    assert call(session, "get_user_details").ok
    assert call(session, "get_order_details", {"order_id": "#W2001"}).ok
    assert call(session, "get_product_details", {"product_id": "P-KEYBOARD"}).ok
    assert call(session, "get_product_details", {"product_id": "P-SHIRT"}).ok
    return session


def play(directory: Path) -> dict[str, int]:
    """Two guards (enforcing, and all in shadow) over the retail store, one trail. Returns the
    side effects of each store."""
    # mask_logs off: the log filter is process-wide and would outlive this fixture
    handle = configure(trail_dir=directory, masking_key=KEY, service_name="retail", mask_logs=False)
    enforced = build_retail(clock=ManualClock(), observer=handle.observer)
    shadow = build_retail(clock=ManualClock(), observer=handle.observer, shadow=True)
    anonymous = enforced.session("chat-1")
    call(anonymous, "get_order_details", {"order_id": "#W2001"})  # AUTH_REQUIRED
    session = _identified(anonymous)
    call(session, "exchange_delivered_order_items", {**EXCHANGE, "new_item_ids": ["TS-BLACK-L"]})
    call(session, "exchange_delivered_order_items", {**EXCHANGE, "new_item_ids": ["KB-RED-FULL"]})
    omar = enforced.session("chat-2")
    call(omar, "find_user_id_by_email", {"email": "omar.ali@example.com"})
    call(omar, "get_user_details")
    call(omar, "get_order_details", {"order_id": "#W3001"})
    call(
        omar,
        "return_delivered_order_items",
        {"order_id": "#W3001", "item_ids": ["TS-BLACK-L"], "payment_method_id": "paypal_5100"},
    )
    watched = _identified(shadow.session("chat-3"))
    call(watched, "exchange_delivered_order_items", {**EXCHANGE, "new_item_ids": ["TS-BLACK-L"]})
    handle.shutdown()
    return {"enforced": enforced.backend.side_effects, "shadow": shadow.backend.side_effects}


@pytest.fixture(scope="module")
def retail_trail(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    directory = tmp_path_factory.mktemp("retail-trail")
    return directory, play(directory)
