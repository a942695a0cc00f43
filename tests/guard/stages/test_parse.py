"""Stage 2: arguments must be a JSON object."""

from __future__ import annotations

import pytest

from guard.shop import ShopApp


class TestParse:
    @pytest.mark.parametrize(
        "raw",
        [
            '{"order_id": "ORD-1001"',
            "ORD-1001",
            "",
            "[]",
            '"ORD-1001"',
            "1001",
            "null",
            "true",
            '{"order_id": NaN}',
            "x" * 70_000,
            None,
        ],
    )
    def test_not_a_json_object(self, shop: ShopApp, raw: str | None) -> None:
        """Malformed text, non-objects, NaN and oversize input are INVALID_JSON and never reach a handler."""
        result = shop.session("s1", "CUS-1").execute("get_order", raw)
        assert result.code == "INVALID_JSON"
        assert result.ok is False
        assert "JSON" in result.message or "large" in result.message
        assert shop.backend.requests == 0

    def test_error_position_is_reported(self, shop: ShopApp) -> None:
        """The message says where the JSON broke, so the model can fix it."""
        result = shop.session("s1", "CUS-1").execute("get_order", '{"order_id" "ORD-1001"}')
        assert "column" in result.message

    def test_object_arguments_are_accepted(self, shop: ShopApp) -> None:
        """Providers that send objects (Anthropic, MCP) are handled like their JSON text."""
        result = shop.session("s1", "CUS-1").execute("get_order", {"order_id": "ORD-1001"})
        assert result.ok
