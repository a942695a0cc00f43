"""The audit trail as regression tests: the demo's database exported as a scenario, replayed with
`--check` against the demo's own shop (the decisions hold) and against a stricter one (they change)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner

import telemetry
from analytics.load import connect, load
from analytics.scenario import export_scenario
from callgate.cli import main
from callgate.demo import DEMO_MASKING_KEY
from guard.shop import build_shop

CUSTOMERS = [f"CUS-{n}" for n in range(1, 1001)]


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's database: 2,000 sessions of the seeded fleet, loaded into DuckDB."""
    out = tmp_path_factory.mktemp("demo")
    result = CliRunner().invoke(main, ["demo", "--no-dashboard", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out / "callgate.duckdb"


def export(db: Path, target: Path, *args: str) -> dict[str, Any]:
    principals = [arg for customer in CUSTOMERS for arg in ("--principal", customer)]
    result = CliRunner(env={"CALLGATE_MASKING_KEY": DEMO_MASKING_KEY}).invoke(
        main, ["export", "--db", str(db), "--scenario", str(target), "--json", *principals, *args]
    )
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def check(scenario: Path, app: str) -> tuple[int, list[dict[str, Any]]]:
    result = CliRunner().invoke(main, ["replay", str(scenario), "--check", "--app", app])
    return result.exit_code, [json.loads(line) for line in result.stdout.splitlines()]


class TestRoundTrip:
    def test_the_demo_replays_as_recorded(self, demo_db: Path, tmp_path: Path) -> None:
        """Every exported call is decided again as recorded, but where a skipped call changed the world."""
        scenario = tmp_path / "all.jsonl"
        exported = export(demo_db, scenario)
        assert exported["calls"] > 5_000
        reasons = {s["reason"] for s in exported["skipped"]}
        assert reasons and all("depended on the backend" in reason for reason in reasons)
        code, rows = check(scenario, "callgate.fleet:demo_shop")
        summary = rows[-1]["summary"]
        assert summary["checked"] == exported["calls"] and summary["malformed_lines"] == 0
        changed = [r for r in rows if r.get("changed")]
        assert code == (1 if changed else 0)
        # a skipped call that changed the world (a timed-out refund that went through) can change a
        # later decision for the same customer; nothing else may
        assert len(changed) <= 3
        touched = {s["session"] for s in exported["skipped"]}
        lines = [json.loads(line) for line in scenario.read_text().splitlines()]
        owner = {line["call_id"]: line["principal"] for line in lines if "call_id" in line}
        affected = {line["principal"] for line in lines if line.get("session") in touched}
        assert all(owner[row["call_id"]] in affected for row in changed)

    def test_a_stricter_policy_is_caught(self, demo_db: Path, tmp_path: Path) -> None:
        """Against a shop whose customers may refund at most 10.00, --check lists the refunds that changed."""
        scenario = tmp_path / "refunds.jsonl"
        exported = export(
            demo_db, scenario, "--tool", "refund_order", "--code", "CONFIRMATION_REQUIRED"
        )
        lines = [json.loads(line) for line in scenario.read_text().splitlines()]
        assert any(line.get("context") for line in lines)  # the get_order calls the refunds needed
        assert {line["tool"] for line in lines if "tool" in line and not line.get("context")} == {
            "refund_order"
        }
        module = tmp_path / "strict_shop.py"
        module.write_text(
            "from callgate.fleet import demo_shop\n"
            "from guard import AmountLimit, RateLimit, RolePolicy\n"
            "from guard.shop import shop_policy\n"
            "from guard.shop.app import READS\n"
            "def make(clock):\n"
            "    shop = demo_shop(clock)\n"
            "    strict = RolePolicy(tools=READS | {'refund_order'},\n"
            "        limits=(AmountLimit(tool='refund_order', per_request=1_000),))\n"
            "    policy = shop_policy(rate_limit=RateLimit(calls=5, seconds=1.0),\n"
            "        roles={**shop.guard.policy.roles, 'customer': strict})\n"
            "    from guard.shop import build_shop\n"
            "    return build_shop(orders=list(shop.backend.orders.values()), clock=clock, policy=policy)\n"
        )
        import sys

        sys.path.insert(0, str(tmp_path))
        try:
            code, rows = check(scenario, "strict_shop:make")
        finally:
            sys.path.remove(str(tmp_path))
        changed = [r for r in rows if r.get("changed")]
        assert code == 1 and exported["calls"] > 0
        assert changed and all(r["code"] == "POLICY_LIMIT" for r in changed)


class TestWhatCannotBeReplayed:
    def test_masked_arguments_and_unknown_principals_are_skipped(self, tmp_path: Path) -> None:
        """A call whose arguments were masked, and one of a principal not named, are listed, not guessed."""
        spans = tmp_path / "spans"
        handle = telemetry.configure(
            service_name="t",
            trail=True,
            trail_dir=spans,
            otlp=False,
            metrics=False,
            masking_key="k",
        )
        shop = build_shop(observer=handle.observer)
        one = shop.session("s1", "CUS-1")
        one.execute("get_order", '{"order_id": "ORD-1001"}', call_id="plain")
        one.execute("get_order", '{"order_id": "jane@example.com"}', call_id="masked")
        shop.session("s2", "CUS-2").execute(
            "get_order", '{"order_id": "ORD-1002"}', call_id="other"
        )
        handle.shutdown()
        db = tmp_path / "t.duckdb"
        con = connect(db)
        try:
            load(con, sorted(spans.rglob("*.jsonl")))
            found = export_scenario(con, principals=["CUS-1"], key="k")
        finally:
            con.close()
        calls = [line for line in found.lines if "call_id" in line]
        assert [c["call_id"] for c in calls] == ["plain"]
        assert calls[0]["principal"] == "CUS-1"
        reasons = {s.call_id: s.reason for s in found.skipped}
        assert "masked" in reasons["masked"]
        assert "pseudonymous" in reasons["other"]

    def test_without_a_key_every_call_is_pseudonymous(self, tmp_path: Path) -> None:
        """Naming principals without the masking key is refused: pseudonyms could never match."""
        db = tmp_path / "empty.duckdb"
        connect(db).close()
        result = CliRunner(env={"CALLGATE_MASKING_KEY": ""}).invoke(
            main,
            [
                "export",
                "--db",
                str(db),
                "--scenario",
                str(tmp_path / "s.jsonl"),
                "--principal",
                "CUS-1",
            ],
        )
        assert result.exit_code == 2
        assert "masking key" in result.output
        with duckdb.connect(str(db)) as con:
            assert export_scenario(con).lines == ()
