"""`callgate replay` on hostile scenario lines: every malformed line reported and skipped, nothing
aborts the run or poisons later lines, nothing is approved by accident, and the exit code says so."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from callgate.cli import main
from guard.replay import Replayer

REFUND = {"order_id": "ORD-1001", "amount_cents": 2590, "currency": "BRL", "reason": "damaged"}
GOOD = json.dumps(
    {
        "session": "s1",
        "principal": "CUS-1",
        "tool": "get_order",
        "arguments": {"order_id": "ORD-1001"},
        "call_id": "ok",
    }
)


def call(**fields: Any) -> str:
    return json.dumps({"session": "s1", "principal": "CUS-1", "role": "customer"} | fields)


def replay(tmp_path: Path, lines: list[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    scenario = tmp_path / "scenario.jsonl"
    scenario.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogateescape")
    result = CliRunner().invoke(main, ["replay", str(scenario), *args])
    assert "Traceback" not in result.output
    return result.exit_code, [json.loads(row) for row in result.stdout.splitlines()], result.stderr


HOSTILE = [
    '{"session": "s1", "principal": "CUS-1", "tool": "get_order\\ud800", "arguments": "{}"}',
    '{"fault": "transient", "count": 1e309}',
    '{"fault": "transient", "count": -3}',
    '{"fault": "transient", "count": "3"}',
    "[" * 50_000 + "]" * 50_000,
    '{"a": ' * 5_000 + "1" + "}" * 5_000,
    '{"advance_seconds": NaN}',
    '{"advance_seconds": Infinity}',
    '{"advance_seconds": -60}',
    '{"advance_seconds": 1e300}',
    '{"at": "yesterday"}',
    '{"decide": "nobody", "approve": true}',
    call(tool="refund_order", arguments=REFUND, approve="false"),
    call(tool="refund_order", arguments=REFUND, approve=1),
    call(tool="get_order", principal=""),
    call(tool="get_order", unknown_field=True),
    '"just a string"',
    "\udcff\udcfe not utf-8",
]


class TestHostileLines:
    def test_each_is_reported_and_the_good_lines_still_run(self, tmp_path: Path) -> None:
        """Every hostile line is one error record with its number; good lines before and after run; exit 2."""
        lines = [GOOD, *HOSTILE, GOOD.replace('"ok"', '"ok2"')]
        code, rows, stderr = replay(tmp_path, lines)
        assert code == 2
        errors = [r for r in rows if "error" in r]
        assert [e["line"] for e in errors] == list(range(2, 2 + len(HOSTILE)))
        calls = [r for r in rows if "code" in r]
        assert [(c["call_id"], c["code"]) for c in calls] == [("ok", "OK"), ("ok2", "OK")]
        summary = rows[-1]["summary"]
        assert summary["malformed_lines"] == len(HOSTILE)
        assert summary["side_effects"] == 0
        assert f"{len(HOSTILE)} malformed line(s) skipped" in stderr

    def test_a_string_false_never_approves(self, tmp_path: Path) -> None:
        """`"approve": "false"` is refused, so the refund it rode on neither runs nor gets approved."""
        code, rows, _ = replay(
            tmp_path,
            [
                call(tool="get_order", arguments={"order_id": "ORD-1001"}),
                call(tool="refund_order", arguments=REFUND, approve="false"),
                call(tool="refund_order", arguments=REFUND, approve="yes"),
            ],
        )
        assert code == 2
        assert rows[-1]["summary"]["side_effects"] == 0
        assert rows[-1]["summary"]["calls"] == 1

    def test_nan_does_not_break_later_calls(self, tmp_path: Path) -> None:
        """After a NaN clock step is refused, the clock still works: a later refund is approved and runs."""
        code, rows, _ = replay(
            tmp_path,
            [
                '{"advance_seconds": NaN}',
                call(tool="get_order", arguments={"order_id": "ORD-1001"}),
                json.dumps({"advance_seconds": 5}),
                call(tool="refund_order", arguments=REFUND, approve=True, call_id="r1"),
            ],
        )
        assert code == 2
        assert [r["code"] for r in rows if "code" in r] == ["OK", "OK"]
        assert rows[-1]["summary"]["side_effects"] == 1

    def test_not_a_scenario(self, tmp_path: Path) -> None:
        """A README given as the scenario: every non-blank line reported, non-zero exit with the count."""
        readme = tmp_path / "README.md"
        readme.write_text("# callgate\n\nA gate.\n\n```\ncode\n```\n")
        result = CliRunner().invoke(main, ["replay", str(readme)])
        assert result.exit_code == 2
        assert "5 malformed line(s) skipped" in result.stderr

    def test_unknown_app_is_a_usage_error(self, tmp_path: Path) -> None:
        """`--app nope:f` says it cannot import nope; no traceback."""
        scenario = tmp_path / "s.jsonl"
        scenario.write_text(GOOD + "\n")
        for spec, words in (
            ("nope:f", "cannot import 'nope'"),
            ("guard:nothing", "no callable"),
            ("x", "module:factory"),
        ):
            result = CliRunner().invoke(main, ["replay", str(scenario), "--app", spec])
            assert result.exit_code == 2, spec
            assert words in result.output and "Traceback" not in result.output


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "session",
        "principal",
        "role",
        "tool",
        "arguments",
        "call_id",
        "approve",
        "new_turn",
        "expect",
        "fault",
        "count",
        "advance_seconds",
        "at",
        "decide",
        "approver",
        "context",
    ]
)


class TestAnyLine:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(KEYS, JSON_VALUES, max_size=6))
    def test_objects_of_known_keys(self, record: dict[str, Any]) -> None:
        """Any object of known keys and any values: a result or an error record, never an exception."""
        replayer = Replayer.create()
        out = list(replayer.run([json.dumps(record), GOOD]))
        assert "error" in out[0] or "code" in out[0] or len(out) == 2
        assert out[-2]["code"] == "OK"
        assert replayer.clock.now() == replayer.clock.now()  # still a number, not NaN

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=string.printable + '\ud800\udfff\u2028{}[]":,', max_size=80))
    def test_any_text(self, text: str) -> None:
        """Any text as a line: skipped blank, an error record, or a result; the next line still runs."""
        out = list(Replayer.create().run([text, GOOD]))
        assert out[-2]["code"] == "OK"
        assert out[-1]["summary"]["malformed_lines"] in (0, 1)
