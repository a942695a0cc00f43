"""Stage 1: unknown tools, the allowlist per role, and scopes."""

from __future__ import annotations

from guard import Principal
from guard.shop import ShopApp
from tests.guard.conftest import order_args, refund_args


class TestResolve:
    def test_unknown_tool_lists_what_may_be_used(self, shop: ShopApp) -> None:
        """UNKNOWN_TOOL names only the tools this role may call."""
        result = shop.session("s1", "CUS-1", role="viewer").execute("call_api", "{}")
        assert result.code == "UNKNOWN_TOOL"
        assert result.data == {
            "available": ["get_order", "get_refund_status", "search_refund_policy"]
        }
        assert "refund_order" not in result.message

    def test_tool_not_on_the_roles_allowlist(self, shop: ShopApp) -> None:
        """A viewer's session cannot call the refund tool, and nothing runs."""
        result = shop.session("s1", "CUS-1", role="viewer").execute("refund_order", refund_args())
        assert result.code == "TOOL_NOT_ALLOWED"
        assert shop.backend.side_effects == 0

    def test_unknown_role_may_call_nothing(self, shop: ShopApp) -> None:
        """A role the policy does not know gets no tools at all."""
        result = shop.session("s1", "CUS-1", role="intruder").execute("get_order", order_args())
        assert result.code == "TOOL_NOT_ALLOWED"
        assert shop.backend.requests == 0

    def test_scope_missing(self, shop: ShopApp) -> None:
        """Without the tool's scope the call is PERMISSION_DENIED before any order is looked at."""
        principal = Principal(id="CUS-1", role="customer", scopes=frozenset({"policy:read"}))
        session = shop.guard.session("s1", principal)
        foreign = session.execute("get_order", order_args("ORD-1002"))
        missing = session.execute("get_order", order_args("ORD-9999"))
        assert foreign.code == missing.code == "PERMISSION_DENIED"
        assert foreign.message == missing.message
        assert shop.backend.requests == 0
