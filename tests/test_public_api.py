"""Each package has one public surface: its __init__'s __all__, sorted and complete.

What each package may import is a contract of its own: tests/test_layers.py."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "callgate",
    "guard",
    "guard.stores",
    "guard.providers",
    "guard.shop",
    "guard.stages",
    "callgate.adapters",
    "callgate.gateway",
]


def _isort_style(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


class TestPublicApi:
    @pytest.mark.parametrize("name", PACKAGES)
    def test_all_is_sorted_and_complete(self, name: str) -> None:
        """__all__ is sorted (isort style), every name in it exists, and every public class or function is in it."""
        module = importlib.import_module(name)
        exported = list(module.__all__)
        assert exported == sorted(exported, key=_isort_style)
        assert all(hasattr(module, item) for item in exported)
        public = {
            item
            for item, value in vars(module).items()
            if not item.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
        }
        assert public <= set(exported)
