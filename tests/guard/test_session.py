"""Who a session acts for: the host binds a user once; moving to another needs its explicit word."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from guard import Principal, PrincipalSwitch
from guard.shop import ShopApp, build_shop
from tests.guard.conftest import order_args

ids = st.text(min_size=1, max_size=12)


def customer(principal_id: str) -> Principal:
    return Principal(id=principal_id, role="customer", scopes=frozenset({"orders:read"}))


class TestAuthenticate:
    """``Session.authenticate`` refuses to move an identified session, as a lookup does."""

    @given(first=ids, second=ids)
    def test_an_identified_session_is_not_moved_silently(self, first: str, second: str) -> None:
        """Binding any other user to an identified session raises, and the session keeps its user."""
        shop = build_shop()
        session = shop.guard.session("s1", customer(first))
        if first == second:
            session.authenticate(customer(second))
            assert session.principal.id == first
            return
        with pytest.raises(PrincipalSwitch):
            session.authenticate(customer(second))
        assert session.principal == customer(first) and session.previous_principal is None

    def test_the_host_may_switch_explicitly(self, shop: ShopApp) -> None:
        """``switch=True`` moves the session; the next call records whom it acted for before."""
        session = shop.guard.session("s1", customer("CUS-2"))
        session.authenticate(customer("CUS-1"), switch=True)
        assert session.principal.id == "CUS-1"
        assert session.execute("get_order", order_args()).ok
        assert session.previous_principal is None  # handed to the call's record

    def test_an_anonymous_session_is_identified(self, shop: ShopApp) -> None:
        """The first identification needs no flag: nobody was bound yet."""
        session = shop.guard.session("s1", Principal.anonymous(role="customer"))
        session.authenticate(customer("CUS-1"))
        assert session.principal.id == "CUS-1" and session.principal.authenticated

    def test_the_same_user_may_gain_scopes(self, shop: ShopApp) -> None:
        """Re-binding the same user (a step-up login with more scopes) is not a switch."""
        session = shop.guard.session("s1", customer("CUS-1"))
        more = Principal(id="CUS-1", role="customer", scopes=frozenset({"orders:read", "x"}))
        session.authenticate(more)
        assert session.principal == more
