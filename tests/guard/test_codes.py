"""Conventions that keep the reason codes honest: documented, produced, stable."""

from __future__ import annotations

import re
from pathlib import Path

from guard import Code

ROOT = Path(__file__).resolve().parents[2]


class TestCodes:
    def test_every_code_is_documented(self) -> None:
        """docs/codes.md has a row for every code and none that does not exist."""
        text = (ROOT / "docs" / "codes.md").read_text()
        documented = set(re.findall(r"^\| `([A-Z_]+)` \|", text, flags=re.MULTILINE))
        assert documented == {code.value for code in Code}

    def test_documented_stage_and_fixable_match_the_enum(self) -> None:
        """The table's stage and fixable columns say what the enum says."""
        text = (ROOT / "docs" / "codes.md").read_text()
        for code, stage, fixable in re.findall(
            r"^\| `([A-Z_]+)` \| (\w+) \| (yes|no|-) \|", text, flags=re.MULTILINE
        ):
            assert Code(code).stage == stage
            assert fixable == "-" or Code(code).fixable == (fixable == "yes")

    def test_every_code_is_produced_somewhere(self) -> None:
        """Each code is produced by some stage, the shop's rules or the MCP gateway: no dead vocabulary."""
        paths = [*(ROOT / "guard").rglob("*.py"), *(ROOT / "callgate" / "gateway").rglob("*.py")]
        source = "\n".join(p.read_text() for p in paths if p.name != "codes.py")
        missing = [code.value for code in Code if f"Code.{code.name}" not in source]
        assert missing == []

    def test_codes_are_upper_snake_and_equal_their_names(self) -> None:
        """Codes are stable UPPER_SNAKE strings equal to their member names."""
        for code in Code:
            assert code.value == code.name and re.fullmatch(r"[A-Z_]+", code.value)
            assert code.phrase.endswith(".")

    def test_only_ok_is_ok(self) -> None:
        """Exactly one success code."""
        assert [code for code in Code if code.ok] == [Code.OK]
