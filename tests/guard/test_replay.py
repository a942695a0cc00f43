"""`callgate replay`: scenario files of proposed calls, without writing Python."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from callgate.cli import main

REFUND = {"order_id": "ORD-1001", "amount_cents": 2590, "currency": "BRL", "reason": "damaged"}


def line(**fields: Any) -> str:
    return json.dumps({"session": "s1", "principal": "CUS-1", "role": "customer"} | fields)


def run(tmp_path: Path, lines: list[str], *args: str, code: int = 0) -> list[dict[str, Any]]:
    scenario = tmp_path / "scenario.jsonl"
    scenario.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["replay", str(scenario), *args])
    assert result.exit_code == code, result.output
    return [json.loads(row) for row in result.stdout.splitlines()]


class TestReplay:
    def test_a_refund_story(self, tmp_path: Path) -> None:
        """Read, a wrong-unit refund, a lost response, an approved refund, and a repeat: one side effect."""
        rows = run(
            tmp_path,
            [
                line(tool="get_order", arguments='{"order_id": "ORD-1001"}', call_id="c1"),
                line(
                    tool="refund_order",
                    arguments=json.dumps(REFUND | {"amount_cents": 25.9}),
                    call_id="c2",
                ),
                json.dumps({"fault": "lose_next_response", "count": 1}),
                line(tool="refund_order", arguments=REFUND, call_id="c3", approve=True),
                line(tool="refund_order", arguments=json.dumps(REFUND), call_id="c4"),
            ],
        )
        assert [(r["call_id"], r["code"], r["replayed"]) for r in rows[:-1]] == [
            ("c1", "OK", False),
            ("c2", "INVALID_ARGUMENTS", False),
            ("c3", "OK", False),
            ("c4", "OK", True),
        ]
        assert set(rows[0]) == {"call_id", "tool", "ok", "code", "replayed", "outcome", "message"}
        assert rows[-1]["summary"] | {"by_code": None} == {
            "calls": 4,
            "ok": 3,
            "side_effects": 1,
            "by_code": None,
            "malformed_lines": 0,
            "checked": 0,
            "changed": 0,
        }
        assert rows[-1]["summary"]["by_code"] == {"INVALID_ARGUMENTS": 1, "OK": 3}

    def test_denied_pending_and_expired(self, tmp_path: Path) -> None:
        """approve false denies, absent stays pending, and advancing the clock expires an approval."""
        rows = run(
            tmp_path,
            [
                line(tool="get_order", arguments={"order_id": "ORD-1001"}, call_id="c1"),
                line(tool="refund_order", arguments=REFUND, call_id="c2", approve=False),
                line(tool="refund_order", arguments=REFUND | {"amount_cents": 100}, call_id="c3"),
                json.dumps({"advance_seconds": 3600}),
                line(
                    tool="refund_order",
                    arguments=REFUND | {"amount_cents": 200},
                    call_id="c4",
                    approve=True,
                ),
            ],
        )
        assert [r["code"] for r in rows[:-1]] == [
            "OK",
            "CONFIRMATION_DENIED",
            "CONFIRMATION_REQUIRED",
            "OK",
        ]
        assert rows[-1]["summary"]["side_effects"] == 1

    def test_malformed_lines_are_counted_and_skipped(self, tmp_path: Path) -> None:
        """A bad line is reported with its number; the lines around it still run; exit 2."""
        rows = run(
            tmp_path,
            [
                line(tool="get_order", arguments={"order_id": "ORD-1001"}, call_id="c1"),
                "{not json",
                json.dumps({"tool": "get_order"}),
                line(tool="get_order", arguments={"order_id": "ORD-1003"}, call_id="c2"),
            ],
            code=2,
        )
        assert rows[0]["code"] == "OK" and rows[3]["code"] == "OK"
        assert rows[1]["line"] == 2 and rows[2]["line"] == 3
        assert rows[-1]["summary"]["malformed_lines"] == 2

    def test_transient_fault(self, tmp_path: Path) -> None:
        """Injected transient failures beyond the retry budget end UPSTREAM_UNAVAILABLE."""
        rows = run(
            tmp_path,
            [
                json.dumps({"fault": "transient", "count": 3}),
                line(tool="get_order", arguments={"order_id": "ORD-1001"}, call_id="c1"),
            ],
        )
        assert rows[0]["code"] == "UPSTREAM_UNAVAILABLE"

    def test_users_own_guard(self, tmp_path: Path) -> None:
        """--app module:factory runs a user's guard; side effects are unknown without a backend."""
        module = tmp_path / "my_app.py"
        module.write_text(
            "from guard.shop import build_shop\n"
            "def make(clock):\n"
            "    return build_shop(clock=clock).guard\n"
        )
        import sys

        sys.path.insert(0, str(tmp_path))
        try:
            rows = run(
                tmp_path,
                [line(tool="get_order", arguments={"order_id": "ORD-1001"})],
                "--app",
                "my_app:make",
            )
        finally:
            sys.path.remove(str(tmp_path))
        assert rows[0]["code"] == "OK"
        assert rows[-1]["summary"]["side_effects"] is None
