"""``callgate approvals``: what the approver reads (masked, escaped, every fact), who decided."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field

from callgate.approvals import open_stores
from callgate.cli import main
from guard import (
    CheckContext,
    Code,
    DomainCode,
    Effect,
    Guard,
    Policy,
    Principal,
    Risk,
    RolePolicy,
    ToolContext,
    ToolResult,
    tool,
)

LATE = DomainCode(
    "LATE_DELIVERY",
    stage="rules",
    fixable=False,
    phrase="The order was delivered late.",
    advice="Tell the user the refund covers the delay.",
)

ACCOUNT = "DE89 3704 0044 0532 0130 00"


class Payout(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(json_schema_extra={"sensitive": True})
    note: str


def make_guard(store: str, done: list[dict[str, Any]]) -> Guard:
    def check(args: Payout, ctx: CheckContext[Any]) -> None:
        ctx.warn(LATE, "Delivered 3 days late.")

    @tool(arguments=Payout, effect=Effect.WRITE, risk=Risk.HIGH, check=check, codes=(LATE,))
    def payout(args: Payout, ctx: ToolContext) -> dict[str, Any]:
        """Pay money out."""
        done.append(args.model_dump())
        return {"paid": True}

    stores = open_stores(store)
    return Guard(
        tools=[payout],
        policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"payout"}))}),
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
    )


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, ["approvals", *args])


def propose(guard: Guard, note: str = "ok", *, anonymous: bool = False) -> ToolResult:
    principal = Principal.anonymous(role="agent") if anonymous else Principal(id="U1", role="agent")
    result = guard.session("conv-1", principal).execute(
        "payout", {"account": ACCOUNT, "note": note}
    )
    assert result.code is Code.CONFIRMATION_REQUIRED and result.approval_id
    return result


class TestWhatTheApproverReads:
    """list and show: sensitive values masked, hidden characters escaped, warnings and identity."""

    def test_sensitive_values_are_masked_and_the_executor_keeps_them(self, store: str) -> None:
        """The account number is in no output; the approved payout runs with it exactly."""
        done: list[dict[str, Any]] = []
        guard = make_guard(store, done)
        pending = propose(guard)
        assert pending.approval_id is not None
        outputs = [
            invoke("list", "--store", store).output,
            invoke("list", "--store", store, "--json").output,
            invoke("show", pending.approval_id, "--store", store).output,
            invoke("approve", pending.approval_id, "--store", store, "--by", "alice").output,
        ]
        assert all(ACCOUNT not in text and "[REDACTED:sensitive]" in text for text in outputs)
        assert guard.approve(pending.approval_id, by="host").ok
        assert done == [{"account": ACCOUNT, "note": "ok"}]

    def test_warnings_and_identification_are_shown(self, store: str) -> None:
        """An anonymous proposal says so; the check's warning is listed and shown."""
        guard = make_guard(store, [])
        pending = propose(guard, anonymous=True)
        assert pending.approval_id is not None
        line = invoke("list", "--store", store).output
        assert "(NOT identified)" in line and "warnings LATE_DELIVERY" in line
        shown = json.loads(invoke("show", pending.approval_id, "--store", store).output)
        assert shown["authenticated"] is False
        assert shown["warnings"] == [{"code": "LATE_DELIVERY", "message": "Delivered 3 days late."}]

    @pytest.mark.parametrize(
        "hostile", ["pay \u202e001 EUR", "ok\nexpires 2099 (approved by security)", "a\u200bb"]
    )
    def test_hidden_characters_are_escaped_and_json_stays_exact(
        self, store: str, hostile: str
    ) -> None:
        """No bidi, newline or zero-width character reaches the terminal; --json parses exactly."""
        guard = make_guard(store, [])
        propose(guard, hostile)
        listed = invoke("list", "--store", store).output
        assert listed.count("\n") == 1 and hostile not in listed
        assert not any(c in listed for c in "\u202e\u200b")
        (row,) = [
            json.loads(line)
            for line in invoke("list", "--store", store, "--json").output.splitlines()
        ]
        assert row["arguments"]["note"] == hostile


class TestWhoDecided:
    """A decision that changed nothing exits non-zero and names the real decider."""

    def test_a_repeat_approval_names_the_first_approver(self, store: str) -> None:
        """alice approves; bob's approval (and alice's own repeat) exit 1 and name alice."""
        pending = propose(make_guard(store, []))
        assert pending.approval_id is not None
        first = invoke("approve", pending.approval_id, "--store", store, "--by", "alice")
        assert first.exit_code == 0 and "approved by alice" in first.output
        for by in ("bob", "alice"):
            again = invoke("approve", pending.approval_id, "--store", store, "--by", by)
            assert again.exit_code == 1
            assert "approved (decided by alice); nothing changed" in again.output
            assert "by bob" not in again.output.replace("decided by alice", "")

    def test_a_late_decision_exits_non_zero(self, tmp_path: Path) -> None:
        """An action past its window: approving says expired, exit 1, and nothing runs."""
        done: list[dict[str, Any]] = []
        store = str(tmp_path / "guard.db")
        guard = make_guard(store, done)
        pending = propose(guard)
        assert pending.approval_id is not None
        stores = open_stores(store)
        try:
            stores.approvals.decide(pending.approval_id, approve=True, by="x", now=9e12)
        finally:
            stores.close()
        late = invoke("approve", pending.approval_id, "--store", store, "--by", "alice")
        assert late.exit_code == 1 and "is expired; nothing changed" in late.output
        assert guard.approve(pending.approval_id, by="host").code is Code.CONFIRMATION_EXPIRED
        assert done == []

    def test_racing_approvers_one_wins_the_loser_exits_non_zero(self, tmp_path: Path) -> None:
        """Eight processes approve at once: one exits 0, seven exit 1 naming the one that won."""
        store = str(tmp_path / "guard.db")
        pending = propose(make_guard(store, []))
        assert pending.approval_id is not None
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        racers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "callgate",
                    "approvals",
                    "approve",
                    pending.approval_id,
                    "--store",
                    store,
                    "--by",
                    f"approver-{n}",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            for n in range(8)
        ]
        finished = [(racer.wait(timeout=120), racer.communicate()[0]) for racer in racers]
        winners = [out for code, out in finished if code == 0]
        losers = [out for code, out in finished if code == 1]
        assert len(winners) == 1 and len(losers) == 7, finished
        winner = winners[0].split(" by ")[1].split(":")[0]
        assert all(f"(decided by {winner}); nothing changed" in out for out in losers)


class TestStoreFile:
    """The CLI refuses a store file others may write, unless told."""

    def test_a_group_writable_store_needs_the_flag(self, tmp_path: Path) -> None:
        """Exit 1 with the reason; --allow-writable-store opens it."""
        store = tmp_path / "guard.db"
        open_stores(str(store)).close()
        store.chmod(0o660)
        refused = invoke("list", "--store", str(store))
        assert refused.exit_code == 1 and "group or others" in refused.output
        allowed = invoke("list", "--store", str(store), "--allow-writable-store")
        assert allowed.exit_code == 0 and "no approvals" in allowed.output
