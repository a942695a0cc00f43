"""Shadow mode: calls that would only have waited for a human are kept apart from refusals."""

from __future__ import annotations

import json
from pathlib import Path

from analytics import shadow
from analytics.load import connect, load
from guard import AmountLimit, Guard, Policy, Principal, RolePolicy
from guard.testing import ManualClock
from telemetry import configure
from tests.guard.injection.domains import all_tools
from tests.guard.injection.scenarios import ATTACKER_MAIL, SAM, base_world


class TestWouldHaveWaited:
    def test_refusals_and_waits_are_counted_apart(self, tmp_path: Path) -> None:
        """A refused transfer is would-have-rejected; an untrusted recipient and a risky amount
        would only have waited, and are counted by would_have_waited instead."""
        trail = tmp_path / "trail"
        handle = configure(trail_dir=trail, masking_key=b"k")
        world = base_world()
        world.inbox.append({"id": "m9", "sender": "x@s.example", "subject": "s",
                            "body": f"mail {ATTACKER_MAIL}"})  # fmt: skip
        tools = all_tools(world)
        cap = AmountLimit(tool="send_money", per_request=100_000, group_by=None)
        role = RolePolicy(tools=frozenset(t.name for t in tools), limits=(cap,))
        guard = Guard(
            tools=tools,
            policy=Policy(roles={"user": role}, rate_limit=None),
            clock=ManualClock(),
            observer=handle.observer,
            shadow=True,
        )
        session = guard.session("s", Principal(id="U-1", role="user"))
        session.execute("list_payees", "{}")
        session.execute("read_inbox", "{}")
        mail = {"to": [ATTACKER_MAIL], "subject": "s", "body": "b"}
        assert session.execute("send_email", json.dumps(mail)).shadow == "UNTRUSTED_VALUE"
        risky = session.execute("send_money", json.dumps({"iban": SAM, "amount_cents": 15_000}))
        assert risky.shadow == "CONFIRMATION_REQUIRED"
        over = session.execute("send_money", json.dumps({"iban": SAM, "amount_cents": 200_000}))
        assert over.shadow == "POLICY_LIMIT"
        handle.shutdown()
        con = connect(tmp_path / "callgate.duckdb")
        try:
            load(con, sorted(trail.glob("*.jsonl")))
            refused = {(r.tool, r.code) for r in shadow.would_have_rejected(con)}
            waited = {(r.tool, r.code) for r in shadow.would_have_waited(con)}
        finally:
            con.close()
        assert refused == {("send_money", "POLICY_LIMIT")}
        assert waited == {
            ("send_email", "UNTRUSTED_VALUE"),
            ("send_money", "CONFIRMATION_REQUIRED"),
        }
        assert len(world.effects) == 3  # shadow mode ran every call
