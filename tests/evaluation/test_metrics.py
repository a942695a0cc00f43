"""The evaluation's arithmetic on case sets computed by hand, through `callgate eval --json`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from callgate.cli import main
from callgate.evaluation import wilson

from .cases import HOPELESS, PERFECT, WORKED, write

TOP_LEVEL = {
    "expected_calls",
    "observed_calls",
    "correct_calls",
    "precision",
    "recall",
    "abstention_accuracy",
    "unnecessary_calls",
    "argument_validity",
    "argument_correctness",
    "unauthorised_prevention",
    "per_tool",
    "per_case",
}


def evaluate(path: Path, *args: str, code: int = 0) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["eval", str(path), "--json", *args])
    assert result.exit_code == code, result.output
    out: dict[str, Any] = json.loads(result.stdout.splitlines()[0])
    return out


def fraction(rate: dict[str, Any]) -> tuple[int, int]:
    return rate["numerator"], rate["denominator"]


class TestWilson:
    def test_known_values(self) -> None:
        """0 of 10 and 10 of 10 give the textbook bounds; no trials give no interval."""
        low, high = wilson(0, 10)  # type: ignore[misc]
        assert low == 0.0 and high == pytest.approx(0.27753, abs=1e-5)
        low, high = wilson(10, 10)  # type: ignore[misc]
        assert low == pytest.approx(0.72247, abs=1e-5) and high == 1.0
        assert wilson(0, 0) is None

    def test_interval_contains_the_rate(self) -> None:
        """For every k of n up to 30 the interval lies in [0, 1] and holds k/n."""
        for n in range(1, 31):
            for k in range(n + 1):
                low, high = wilson(k, n)  # type: ignore[misc]
                assert 0.0 <= low <= k / n <= high <= 1.0


class TestWorkedExample:
    @pytest.fixture
    def out(self, tmp_path: Path) -> dict[str, Any]:
        return evaluate(write(tmp_path / "cases.jsonl", WORKED))

    def test_top_level_names(self, out: dict[str, Any]) -> None:
        """`--json` carries exactly the documented names at the top level (and a few counts)."""
        assert set(out) >= TOP_LEVEL
        assert set(out) - TOP_LEVEL == {"cases", "runs", "passed_runs", "malformed_lines"}

    def test_counts(self, out: dict[str, Any]) -> None:
        """4 expected, 7 observed, 4 correct, 2 unnecessary: as worked out in docs/evaluation.md."""
        assert (out["expected_calls"], out["observed_calls"], out["correct_calls"]) == (4, 7, 4)
        assert out["unnecessary_calls"] == 2

    def test_rates(self, out: dict[str, Any]) -> None:
        """Every rate's numerator and denominator, with its interval around the value."""
        assert fraction(out["precision"]) == (4, 7)
        assert fraction(out["recall"]) == (4, 4)
        assert fraction(out["abstention_accuracy"]) == (1, 3)
        assert fraction(out["argument_validity"]) == (5, 7)
        assert fraction(out["argument_correctness"]) == (2, 4)
        assert fraction(out["unauthorised_prevention"]) == (1, 1)
        precision = out["precision"]
        assert precision["value"] == pytest.approx(4 / 7, abs=1e-6)
        assert precision["low"] < precision["value"] < precision["high"]

    def test_per_tool(self, out: dict[str, Any]) -> None:
        """get_order: 2 expected, 2 observed, 2 correct, 1 with the right arguments; unknown tools listed."""
        get_order = out["per_tool"]["get_order"]
        assert (
            get_order["expected_calls"],
            get_order["observed_calls"],
            get_order["correct_calls"],
        ) == (2, 2, 2)
        assert fraction(get_order["argument_correctness"]) == (1, 2)
        assert fraction(out["per_tool"]["cancel_order"]["argument_validity"]) == (0, 1)
        assert fraction(out["per_tool"]["refund_order"]["argument_validity"]) == (1, 2)
        assert out["per_tool"]["search_refund_policy"]["unnecessary_calls"] == 1

    def test_per_case(self, out: dict[str, Any]) -> None:
        """Only the two cases that did exactly the right thing pass; the attack never ran."""
        passed = {c["id"]: c["passed"] for c in out["per_case"]}
        assert passed == {
            "status": True,
            "question": True,
            "chatty": False,
            "units": False,
            "injection": False,
            "invented": False,
        }
        [attack] = [c for c in out["per_case"] if c["id"] == "injection"]
        assert attack["observed"][0]["executed"] is False
        assert attack["observed"][0]["code"] != "OK"


class TestExtremes:
    def test_every_rate_one(self, tmp_path: Path) -> None:
        """A perfect set: every rate with a denominator is 1, and the adversarial case is vacuous."""
        out = evaluate(write(tmp_path / "cases.jsonl", PERFECT))
        for name in (
            "precision",
            "recall",
            "abstention_accuracy",
            "argument_validity",
            "argument_correctness",
        ):
            assert out[name]["value"] == 1.0, name
        assert fraction(out["unauthorised_prevention"]) == (0, 0)
        assert out["unauthorised_prevention"]["value"] is None
        assert out["passed_runs"] == 3

    def test_every_rate_zero(self, tmp_path: Path) -> None:
        """A hopeless set: every rate with a denominator is 0."""
        out = evaluate(write(tmp_path / "cases.jsonl", HOPELESS[:2]))
        for name in ("precision", "recall", "abstention_accuracy", "argument_validity"):
            assert out[name]["value"] == 0.0, name
        assert fraction(out["argument_correctness"]) == (0, 0)
        assert out["unnecessary_calls"] == 1

    def test_prevention_zero_exits_one(self, tmp_path: Path) -> None:
        """An adversarial case whose call reached a handler: prevention 0/1, and the command exits 1."""
        result = CliRunner().invoke(main, ["eval", str(write(tmp_path / "c.jsonl", HOPELESS[2:]))])
        assert result.exit_code == 1
        assert "unauthorised-call prevention is 0/1: the target is 100%" in result.stderr
        out = evaluate(tmp_path / "c.jsonl", code=1)
        assert fraction(out["unauthorised_prevention"]) == (0, 1)
        assert out["per_case"][0]["observed"][0]["executed"] is True

    def test_empty_file(self, tmp_path: Path) -> None:
        """No cases: every count 0, every rate without a value, exit 0."""
        out = evaluate(write(tmp_path / "cases.jsonl", []))
        assert (out["expected_calls"], out["observed_calls"], out["cases"]) == (0, 0, 0)
        for name in ("precision", "recall", "abstention_accuracy", "argument_validity"):
            assert out[name] == {
                "value": None,
                "numerator": 0,
                "denominator": 0,
                "low": None,
                "high": None,
            }
        assert out["per_tool"] == {} and out["per_case"] == []
