"""Each package has one public surface: its __init__'s __all__, sorted and complete."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "guard",
    "guard.stores",
    "guard.providers",
    "guard.shop",
    "guard.stages",
    "callgate.adapters",
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

    def test_guard_never_imports_opentelemetry(self) -> None:
        """Nothing under guard/ imports OpenTelemetry, DuckDB or Streamlit."""
        from pathlib import Path

        root = Path(__file__).resolve().parents[1] / "guard"
        for path in root.rglob("*.py"):
            text = path.read_text()
            for forbidden in ("opentelemetry", "duckdb", "streamlit"):
                assert f"import {forbidden}" not in text and f"from {forbidden}" not in text, path
