"""Conventions that keep analytics honest: its public surface, its imports, the contract's columns."""

from __future__ import annotations

import inspect
from pathlib import Path

import analytics
from analytics.schema import COLUMNS
from telemetry import attributes as contract


def _isort_style(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2), name


class TestConventions:
    def test_all_is_sorted_and_complete(self):
        """analytics.__all__ is sorted (isort style), exists, and covers its public names."""
        exported = list(analytics.__all__)
        assert exported == sorted(exported, key=_isort_style)
        assert all(hasattr(analytics, name) for name in exported)
        public = {
            name
            for name, value in vars(analytics).items()
            if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
        }
        assert public <= set(exported)

    def test_never_imports_guard(self):
        """analytics knows the span contract, not the guard's classes."""
        root = Path(analytics.__file__).parent
        for path in root.rglob("*.py"):
            text = path.read_text()
            assert "import guard" not in text and "from guard" not in text, path

    def test_every_contract_attribute_has_a_typed_column(self):
        """Each attribute of the contract maps to one typed column of spans."""
        names = {a.name for a in (*contract.CALL_ATTRIBUTES, *contract.STAGE_ATTRIBUTES)}
        assert {c.attribute for c in COLUMNS} == names
        assert len({c.name for c in COLUMNS}) == len(COLUMNS)
