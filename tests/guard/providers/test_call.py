from __future__ import annotations

import dataclasses

import pytest

import guard.providers
from guard.providers import ProposedCall, anthropic, call, mcp, openai


class TestProposedCall:
    def test_is_frozen(self) -> None:
        """A proposed call cannot be changed once parsed."""
        proposed = ProposedCall(name="get_order", arguments="{}", call_id="c1", provider="mcp")
        with pytest.raises(dataclasses.FrozenInstanceError):
            proposed.name = "refund_order"  # type: ignore[misc]

    def test_is_keyword_only(self) -> None:
        """Fields are passed by name, never by position."""
        with pytest.raises(TypeError):
            ProposedCall("get_order", "{}", "c1", "mcp")  # type: ignore[call-arg]


class TestPublicSurface:
    def test_all_is_sorted(self) -> None:
        """The package's ``__all__`` is sorted."""
        assert guard.providers.__all__ == sorted(guard.providers.__all__)

    def test_all_is_complete(self) -> None:
        """The package re-exports exactly the public names of its provider modules."""
        modules = (anthropic, call, mcp, openai)
        exported = {name for module in modules for name in module.__all__}
        assert set(guard.providers.__all__) == exported
        for name in exported:
            assert getattr(guard.providers, name) is not None
