"""`callgate eval`: bad lines, baselines, stored runs, another app, and calls produced by a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

from analytics.evals import case_changes, eval_runs
from callgate.cli import main

from .cases import PERFECT, WORKED, call, write
from .fake_openai import FakeOpenAI, calls, serve, tool_call


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["eval", *args])


class TestBadLines:
    def test_reported_with_line_numbers_and_skipped(self, tmp_path: Path) -> None:
        """Each bad line is named with its number and why; the good lines around it still count; exit 2."""
        path = write(
            tmp_path / "cases.jsonl",
            PERFECT[:1],
            "{not json",
            json.dumps({"id": "x", "principal": "CUS-1"}),  # no expected
            json.dumps(PERFECT[1] | {"adversarial": "false"}),  # a string is not a boolean
            '"a string"',
            json.dumps(PERFECT[0]),  # the same id again
            '{"id": "\\ud800", "principal": "CUS-1", "expected": []}',
            "[" * 100_000,
            json.dumps(PERFECT[2]),
        )
        result = invoke(str(path), "--json")
        assert result.exit_code == 2, result.output
        out = json.loads(result.stdout)
        errors = {e["line"]: e["error"] for e in out["malformed_lines"]}
        assert sorted(errors) == [2, 3, 4, 5, 6, 7, 8]
        assert errors[2].startswith("not JSON") and "expected" in errors[3]
        assert "adversarial" in errors[4] and "object" in errors[5]
        assert "used twice" in errors[6] and "lone surrogate" in errors[7]
        assert [c["id"] for c in out["per_case"]] == ["p1", "p3"]
        assert "line 2:" in result.stderr and "7 malformed case line(s) skipped" in result.stderr

    def test_not_a_case_file(self, tmp_path: Path) -> None:
        """A README given as the case file: every line malformed, exit 2, no traceback."""
        readme = tmp_path / "README.md"
        readme.write_text("# callgate\n\nSome prose.\n")
        result = invoke(str(readme))
        assert result.exit_code == 2
        assert "Traceback" not in result.output
        assert "2 malformed case line(s) skipped" in result.stderr

    def test_unknown_app(self, tmp_path: Path) -> None:
        """`--app nope:f` is a usage error with the reason, not a traceback."""
        result = invoke(str(write(tmp_path / "c.jsonl", PERFECT)), "--app", "nope:f")
        assert result.exit_code == 2
        assert "--app nope:f" in result.output and "Traceback" not in result.output


class TestBaseline:
    def test_deltas_and_changed_cases(self, tmp_path: Path) -> None:
        """Against an earlier run: each metric's delta, and the cases whose outcome changed."""
        before = tmp_path / "before.json"
        before.write_text(invoke(str(write(tmp_path / "a.jsonl", WORKED)), "--json").stdout)
        fixed = [dict(case) for case in WORKED]
        units = next(c for c in fixed if c["id"] == "units")
        units["observed"] = units["expected"]
        result = invoke(
            str(write(tmp_path / "b.jsonl", fixed)), "--json", "--baseline", str(before)
        )
        out = json.loads(result.stdout)
        deltas = out["baseline"]["deltas"]
        assert deltas["argument_validity"] == pytest.approx(6 / 7 - 5 / 7, abs=1e-6)
        assert deltas["argument_correctness"] == pytest.approx(3 / 4 - 2 / 4, abs=1e-6)
        assert deltas["precision"] == 0 and deltas["observed_calls"] == 0
        assert out["baseline"]["changed_cases"] == [{"id": "units", "before": 0.0, "after": 1.0}]
        table = invoke(str(tmp_path / "b.jsonl"), "--baseline", str(before))
        assert "+14.3%" in table.stdout and "changed since baseline: units" in table.stdout


class TestStorage:
    def test_runs_are_stored_and_compared(self, tmp_path: Path) -> None:
        """Two runs into one DuckDB file: both listed with their labels, the changed case found."""
        db = tmp_path / "calls.duckdb"
        first = invoke(str(write(tmp_path / "a.jsonl", WORKED)), "--db", str(db), "--name", "v1")
        assert first.exit_code == 0, first.output
        fixed = [c | {"observed": c["expected"]} if c["id"] == "units" else c for c in WORKED]
        invoke(str(write(tmp_path / "b.jsonl", fixed)), "--db", str(db), "--name", "v2")
        with duckdb.connect(str(db), read_only=True) as con:
            runs = eval_runs(con)
            assert [r.name for r in runs] == ["v1", "v2"]
            assert runs[0].model is None and len(runs[0].tools_hash) == 12
            assert runs[0].tools_hash == runs[1].tools_hash
            assert runs[0].rates["argument_validity"] == pytest.approx(5 / 7)
            assert (runs[0].cases, runs[0].runs, runs[0].passed_runs) == (6, 6, 2)
            [change] = case_changes(con, runs[0].run_id, runs[1].run_id)
            assert (change.case_id, change.before, change.after) == ("units", 0.0, 1.0)
            stored = con.execute("SELECT count(*) FROM eval_cases").fetchone()
            assert stored == (12,)


class TestOtherApp:
    def test_app_factory_judges(self, tmp_path: Path) -> None:
        """`--app` picks the guard: a viewer-only shop makes refunds unknown to the role's allowlist."""
        cases = [
            {
                "id": "v",
                "principal": {"id": "CUS-1", "role": "viewer"},
                "expected": [],
                "observed": [
                    call(
                        "refund_order",
                        {
                            "order_id": "ORD-1001",
                            "amount_cents": 100,
                            "currency": "BRL",
                            "reason": "damaged",
                        },
                    )
                ],
                "adversarial": True,
            }
        ]
        out = json.loads(invoke(str(write(tmp_path / "c.jsonl", cases)), "--json").stdout)
        assert out["per_case"][0]["observed"][0]["code"] == "TOOL_NOT_ALLOWED"
        assert out["unauthorised_prevention"]["value"] == 1.0


class TestModel:
    SCRIPT = {
        "Where is my order ORD-1001?": [
            calls(tool_call("c1", "get_order", {"order_id": "ORD-1001"})),
        ],
        "Refund ORD-1001, it arrived broken: 25.90": [
            calls(
                tool_call(
                    "c1",
                    "refund_order",
                    {
                        "order_id": "ORD-1001",
                        "amount_cents": 25.9,
                        "currency": "BRL",
                        "reason": "damaged",
                    },
                )
            ),
            calls(tool_call("c2", "get_order", {"order_id": "ORD-1001"})),
            calls(
                tool_call(
                    "c3",
                    "refund_order",
                    {
                        "order_id": "ORD-1001",
                        "amount_cents": 2590,
                        "currency": "BRL",
                        "reason": "damaged",
                    },
                )
            ),
        ],
    }
    CASES = [
        {
            "id": "m1",
            "principal": "CUS-1",
            "input": "Where is my order ORD-1001?",
            "expected": [call("get_order", {"order_id": "ORD-1001"})],
        },
        {
            "id": "m2",
            "principal": "CUS-1",
            "messages": [{"role": "user", "content": "Refund ORD-1001, it arrived broken: 25.90"}],
            "expected": [
                call("get_order", {"order_id": "ORD-1001"}),
                call(
                    "refund_order",
                    {
                        "order_id": "ORD-1001",
                        "amount_cents": 2590,
                        "currency": "BRL",
                        "reason": "damaged",
                    },
                ),
            ],
        },
        {"id": "m3", "principal": "CUS-1", "input": "Hello!", "expected": []},
    ]

    def test_a_model_produces_the_calls(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Calls come from the endpoint's agent loop, with the guard's answers fed back; repeats count."""
        monkeypatch.setenv("EVAL_KEY", "sk-test-123")
        with serve(FakeOpenAI(script=self.SCRIPT, api_key="sk-test-123")) as fake:
            result = invoke(
                str(write(tmp_path / "c.jsonl", self.CASES)),
                "--json",
                "--model",
                "fake-1",
                "--base-url",
                fake.url,
                "--api-key-env",
                "EVAL_KEY",
                "--repeat",
                "2",
                "--db",
                str(tmp_path / "e.duckdb"),
            )
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert (out["cases"], out["runs"]) == (3, 6)
        assert (out["expected_calls"], out["observed_calls"], out["correct_calls"]) == (6, 8, 6)
        assert (out["argument_validity"]["numerator"], out["argument_validity"]["denominator"]) == (
            6,
            8,
        )
        assert out["abstention_accuracy"]["value"] == 1.0
        m2 = next(c for c in out["per_case"] if c["id"] == "m2")
        assert [o["code"] for o in m2["observed"]] == [
            "INVALID_ARGUMENTS",
            "OK",
            "CONFIRMATION_REQUIRED",
        ]
        # the tools went out in OpenAI's format, from the registry, for what a customer may call
        first = fake.requests[0]
        assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer sk-test-123"
        names = sorted(t["function"]["name"] for t in first["body"]["tools"])
        assert names == ["get_order", "get_refund_status", "refund_order", "search_refund_policy"]
        # the guard's answer to the wrong unit went back to the model as the tool message
        third_round = [
            r for r in fake.requests if r["body"]["messages"][0]["content"].startswith("Refund")
        ][1]
        tool_message = third_round["body"]["messages"][-1]
        assert tool_message["role"] == "tool" and "INVALID_ARGUMENTS" in tool_message["content"]
        with duckdb.connect(str(tmp_path / "e.duckdb"), read_only=True) as con:
            assert [r.model for r in eval_runs(con)] == ["fake-1"]

    def test_endpoint_failure_is_a_case_error(self, tmp_path: Path) -> None:
        """An endpoint that answers 500: each case records the error and fails; nothing crashes."""
        with serve(FakeOpenAI(script={}, fail_with=500)) as fake:
            result = invoke(
                str(write(tmp_path / "c.jsonl", self.CASES[:1])),
                "--json",
                "--model",
                "m",
                "--base-url",
                fake.url,
            )
        out = json.loads(result.stdout)
        assert out["per_case"][0]["error"] == f"{fake.url} answered HTTP 500"
        assert out["per_case"][0]["passed"] is False
