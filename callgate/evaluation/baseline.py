"""Run against run: the deltas of every metric and the cases whose outcome changed."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

__all__ = ["compare"]

_COUNTS = ("expected_calls", "observed_calls", "correct_calls", "unnecessary_calls")
_RATES = (
    "precision",
    "recall",
    "abstention_accuracy",
    "argument_validity",
    "argument_correctness",
    "unauthorised_prevention",
)


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` for each count and rate (None when either rate has no value), and the
    cases whose share of passing runs changed (a case missing from one side counts as changed)."""
    deltas: dict[str, Any] = {}
    for key in _COUNTS:
        if isinstance(before.get(key), int):
            deltas[key] = after[key] - before[key]
    for key in _RATES:
        old = (before.get(key) or {}).get("value")
        new = (after.get(key) or {}).get("value")
        deltas[key] = None if old is None or new is None else round(new - old, 6)
    old_cases, new_cases = _pass_rates(before), _pass_rates(after)
    changed = [
        {"id": case, "before": old_cases.get(case), "after": new_cases.get(case)}
        for case in sorted(old_cases.keys() | new_cases.keys())
        if old_cases.get(case) != new_cases.get(case)
    ]
    return {"deltas": deltas, "changed_cases": changed}


def _pass_rates(result: Mapping[str, Any]) -> dict[str, float]:
    runs: dict[str, list[bool]] = defaultdict(list)
    for case in result.get("per_case") or ():
        runs[str(case["id"])].append(bool(case["passed"]))
    return {case: sum(passed) / len(passed) for case, passed in runs.items()}
