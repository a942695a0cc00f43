"""Conventions that keep the reason codes honest: documented, produced, stable; domain codes validated."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from guard import Code, ConfigurationError, DomainCode, ToolRegistry
from guard.shop import CURRENCY_MISMATCH, SHOP_CODES, build_shop

ROOT = Path(__file__).resolve().parents[2]
CORE_ROW = re.compile(r"^\| `([A-Z_]+)` \| (\w+) \| (yes|no|-) \| .*? \| (.*?) \|$", re.MULTILINE)

PRODUCED_OUTSIDE_GUARD = {"TOOL_DEFINITION_CHANGED": ROOT / "callgate" / "gateway"}
"""Core codes whose producer lives outside guard/: the MCP gateway's rug-pull block."""


def _core_table() -> str:
    return (ROOT / "docs" / "codes.md").read_text().split("## Domain codes")[0]


class TestCodes:
    def test_every_code_is_documented(self) -> None:
        """docs/codes.md has a row for every core code and none that does not exist."""
        documented = {row[0] for row in CORE_ROW.findall(_core_table())}
        assert documented == {code.value for code in Code}

    def test_documented_stage_fixable_and_advice_match_the_enum(self) -> None:
        """The table's stage, fixable and advice columns say what the enum says."""
        for code, stage, fixable, advice in CORE_ROW.findall(_core_table()):
            assert Code[code].stage == stage
            assert fixable == "-" or Code[code].fixable == (fixable == "yes")
            assert Code[code].advice == advice

    def test_every_code_is_produced_somewhere(self) -> None:
        """Each code is produced by some stage (or by the gateway): no dead vocabulary."""
        roots = [ROOT / "guard"] + [p for p in PRODUCED_OUTSIDE_GUARD.values() if p.exists()]
        source = "\n".join(
            p.read_text() for root in roots for p in root.rglob("*.py") if p.name != "codes.py"
        )
        missing = [
            code.value
            for code in Code
            if f"Code.{code.name}" not in source
            and not (
                code.value in PRODUCED_OUTSIDE_GUARD
                and not PRODUCED_OUTSIDE_GUARD[code.value].exists()
            )
        ]
        assert missing == []

    def test_codes_are_upper_snake_and_equal_their_names(self) -> None:
        """Codes are stable UPPER_SNAKE strings equal to their member names."""
        for code in Code:
            assert code.value == code.name and re.fullmatch(r"[A-Z_]+", code.value)
            assert code.phrase.endswith(".") and code.advice.endswith(".")

    def test_only_ok_is_ok(self) -> None:
        """Exactly one success code."""
        assert [code for code in Code if code.ok] == [Code.OK]

    def test_the_shop_codes_are_not_core_codes(self) -> None:
        """The shop's CURRENCY_MISMATCH and AMOUNT_EXCEEDS_REFUNDABLE live in the shop, not in Code."""
        assert not {str(code) for code in SHOP_CODES} & set(Code.__members__)
        assert set(build_shop().guard.registry.codes) >= {str(code) for code in SHOP_CODES}


class TestDomainCodes:
    def _code(self, value: str = "ITEM_UNAVAILABLE", **overrides: object) -> DomainCode:
        settings: dict[str, object] = {
            "stage": "rules",
            "fixable": True,
            "phrase": "The item is not available.",
            "advice": "Offer another variant.",
        } | overrides
        return DomainCode(value, **settings)  # type: ignore[arg-type]

    def test_a_domain_code_behaves_like_a_core_code(self) -> None:
        """It compares as its spelling and carries stage, fixable, phrase, advice; never ok."""
        code = self._code()
        assert code == "ITEM_UNAVAILABLE" and str(code) == "ITEM_UNAVAILABLE"
        assert (code.name, code.stage, code.fixable, code.ok) == (
            "ITEM_UNAVAILABLE",
            "rules",
            True,
            False,
        )
        assert pickle.loads(pickle.dumps(code)).advice == "Offer another variant."

    @pytest.mark.parametrize(
        "value", ["item_unavailable", "ITEM-UNAVAILABLE", "_X", "A__B", "X" * 65, ""]
    )
    def test_unstable_spellings_are_refused(self, value: str) -> None:
        """Only UPPER_SNAKE of at most 64 characters."""
        with pytest.raises(ConfigurationError, match="UPPER_SNAKE"):
            self._code(value)

    def test_a_core_spelling_is_refused(self) -> None:
        """A domain code cannot shadow a core one."""
        with pytest.raises(ConfigurationError, match="core code"):
            self._code("NOT_FOUND")

    def test_stage_phrase_and_advice_are_checked(self) -> None:
        """Domain codes end the rules or execute stage, and say something."""
        with pytest.raises(ConfigurationError, match="stage"):
            self._code(stage="budget")
        with pytest.raises(ConfigurationError, match="phrase and an advice"):
            self._code(advice=" ")

    def test_two_meanings_for_one_spelling_fail_the_build(self) -> None:
        """The guard refuses to build when two declarations of one code disagree."""
        other = self._code("CURRENCY_MISMATCH", fixable=False)
        shop_tools = list(build_shop().guard.registry.values())
        with pytest.raises(ConfigurationError, match="declared twice"):
            ToolRegistry(shop_tools, codes=[other])
        registry = ToolRegistry(shop_tools, codes=[CURRENCY_MISMATCH])
        assert registry.codes["CURRENCY_MISMATCH"] is CURRENCY_MISMATCH
