"""``callgate approvals`` against an embedded guard's store (SQLite and Redis): list, show, decide."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict

from callgate.approvals import approvals, open_stores
from callgate.cli import main
from guard import Code, Effect, Guard, Policy, Principal, Risk, RolePolicy, ToolContext, tool


class Refund(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str
    amount_cents: int


def make_guard(store: str, done: list[dict[str, Any]]) -> Guard:
    @tool(arguments=Refund, effect=Effect.WRITE, risk=Risk.HIGH)
    def refund(args: Refund, ctx: ToolContext) -> dict[str, Any]:
        """Refund an order."""
        done.append(args.model_dump())
        return {"refunded": args.amount_cents}

    stores = open_stores(store)
    return Guard(
        tools=[refund],
        policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"refund"}))}),
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
    )


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(main, ["approvals", *args])
    return result


class TestApprovalsCli:
    """A human decides outside Python; the guard that holds the tool then runs exactly what was shown."""

    def test_list_show_approve_then_the_embedded_guard_runs_it(self, store: str) -> None:
        """The pending refund is listed with its arguments; approved by alice; guard.approve runs it once."""
        done: list[dict[str, Any]] = []
        guard = make_guard(store, done)
        session = guard.session("conv-9", Principal(id="CUS-1", role="agent"))
        pending = session.execute("refund", {"order_id": "ORD-1", "amount_cents": 700})
        assert pending.code is Code.CONFIRMATION_REQUIRED and pending.approval_id
        listed = invoke("list", "--store", store, "--state", "pending", "--json")
        assert listed.exit_code == 0, listed.output
        rows = [json.loads(line) for line in listed.output.splitlines()]
        assert [r["id"] for r in rows] == [pending.approval_id]
        assert rows[0]["arguments"] == {"order_id": "ORD-1", "amount_cents": 700}
        approved = invoke("approve", pending.approval_id, "--store", store, "--by", "alice")
        assert approved.exit_code == 0 and "approved by alice" in approved.output
        assert done == []  # the CLI records; the process holding the tool runs it
        result = guard.approve(pending.approval_id, by="host")
        assert result.ok and done == [{"order_id": "ORD-1", "amount_cents": 700}]
        shown = json.loads(invoke("show", pending.approval_id, "--store", store).output)
        assert shown["state"] == "approved" and shown["decided_by"] == "alice"
        assert shown["principal"] == "CUS-1" and shown["expires_at"]

    def test_deny_and_a_second_decision(self, store: str) -> None:
        """Denied: the guard ends CONFIRMATION_DENIED; approving afterwards changes nothing."""
        done: list[dict[str, Any]] = []
        guard = make_guard(store, done)
        session = guard.session("conv-10", Principal(id="CUS-2", role="agent"))
        pending = session.execute("refund", {"order_id": "ORD-2", "amount_cents": 1})
        assert pending.approval_id is not None
        assert invoke("deny", pending.approval_id, "--store", store, "--by", "bob").exit_code == 0
        late = invoke("approve", pending.approval_id, "--store", store)
        assert late.exit_code != 0 and "denied (decided by bob)" in late.output
        assert guard.approve(pending.approval_id, by="host").code is Code.CONFIRMATION_DENIED
        assert done == []

    def test_unknown_ids_and_missing_stores_are_errors(self, tmp_path: Path) -> None:
        """Exit codes say so, with a sentence."""
        missing = CliRunner().invoke(approvals, ["list", "--store", str(tmp_path / "none.db")])
        assert missing.exit_code != 0 and "no store at" in missing.output
        store = str(tmp_path / "guard.db")
        open_stores(store).close()
        unknown = CliRunner().invoke(approvals, ["show", "apr_nope", "--store", store])
        assert unknown.exit_code != 0 and "no approval apr_nope" in unknown.output
        empty = CliRunner().invoke(approvals, ["list", "--store", store])
        assert empty.exit_code == 0 and "no approvals" in empty.output
