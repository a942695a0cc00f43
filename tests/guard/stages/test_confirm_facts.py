"""Stage 7: a pending action keeps the proposal's facts, and a seal no store edit can forge."""

from __future__ import annotations

import hashlib
import hmac
import json
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

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
    tool,
)
from guard.stages.confirm import seal, sealed
from guard.stores import ApprovalStore, SQLiteApprovalStore, open_sqlite_stores
from guard.stores.base import PENDING_ACTION_FIELDS, ApprovalState, PendingAction

LATE_DELIVERY = DomainCode(
    "LATE_DELIVERY",
    stage="rules",
    fixable=False,
    phrase="The order was delivered late.",
    advice="Tell the user the refund covers the delay.",
)


class Payout(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str = Field(json_schema_extra={"sensitive": True})
    amount_cents: int


@dataclass
class World:
    """What the payout tool did: who it ran for, with which arguments."""

    runs: list[tuple[Principal, dict[str, Any]]] = field(default_factory=list)


def payout_guard(world: World, approvals: ApprovalStore | None = None, **kw: Any) -> Guard:
    """A high-risk payout whose check warns, with a sensitive account number."""

    def check(args: Payout, ctx: CheckContext[Any]) -> None:
        ctx.warn(LATE_DELIVERY, "Delivered 3 days late.")

    @tool(
        arguments=Payout, effect=Effect.WRITE, risk=Risk.HIGH, check=check, codes=(LATE_DELIVERY,)
    )
    def payout(args: Payout, ctx: ToolContext) -> dict[str, Any]:
        """Pay money out."""
        world.runs.append((ctx.principal, args.model_dump()))
        return {"paid": args.amount_cents}

    return Guard(
        tools=[payout],
        policy=Policy(roles={"agent": RolePolicy(tools=frozenset({"payout"}))}),
        approvals=approvals,
        **kw,
    )


PAYOUT = {"account": "DE89 3704 0044 0532 0130 00", "amount_cents": 700}


class TestPendingFacts:
    """What the approver decides on is what the proposal was, and what runs is the same."""

    def test_an_anonymous_proposal_runs_anonymous(self) -> None:
        """A write an unidentified session proposed runs unidentified once approved."""
        world = World()
        guard = payout_guard(world)
        session = guard.session("s-anon", Principal.anonymous(role="agent"))
        pending = session.execute("payout", PAYOUT)
        assert pending.approval_id is not None
        action = guard.pending(pending.approval_id)
        assert action is not None and action.authenticated is False
        assert guard.approve(pending.approval_id, by="alice").ok
        ((principal, _),) = world.runs
        assert principal.authenticated is False

    def test_warnings_reach_the_approver_the_result_and_the_replay(self) -> None:
        """The check's warning is on the pending action, on the approved result, and on its replay."""
        world = World()
        guard = payout_guard(world)
        pending = guard.session("s-w", Principal(id="U1", role="agent")).execute("payout", PAYOUT)
        assert pending.approval_id is not None
        action = guard.pending(pending.approval_id)
        assert action is not None
        assert json.loads(action.warnings) == [
            {"code": "LATE_DELIVERY", "message": "Delivered 3 days late."}
        ]
        done = guard.approve(pending.approval_id, by="alice")
        again = guard.approve(pending.approval_id, by="alice")
        assert done.ok and [w.code for w in done.warnings] == [LATE_DELIVERY]
        assert again.replayed and [w.code for w in again.warnings] == [LATE_DELIVERY]
        assert again.for_model()["warnings"] == done.for_model()["warnings"]
        assert len(world.runs) == 1

    def test_sensitive_names_are_recorded_and_values_kept_exact(self) -> None:
        """The action names the sensitive argument; the executor still gets its exact value."""
        world = World()
        guard = payout_guard(world)
        pending = guard.session("s-s", Principal(id="U1", role="agent")).execute("payout", PAYOUT)
        assert pending.approval_id is not None
        action = guard.pending(pending.approval_id)
        assert action is not None and action.sensitive == ("account",)
        guard.approve(pending.approval_id, by="alice")
        assert world.runs[0][1] == PAYOUT


def _edits() -> dict[str, Any]:
    """A changed value for every sealed column, as an attacker with the file would write it."""
    return {
        "session_id": "s-other",
        "principal_id": "ADMIN",
        "role": "admin",
        "scopes": '["everything"]',
        "tool": "payout",  # same tool: a no-op edit, kept so the list is every sealed column
        "arguments": json.dumps({"account": "ATTACKER", "amount_cents": 700}),
        "fingerprint": "f" * 32,
        "proposal_key": "k_forged",
        "call_id": "call-forged",
        "reason": "TAINTED_CONTEXT",
        "created_at": 1.0,
        "expires_at": 9e12,
        "authenticated": 1,
        "warnings": "[]",
        "sensitive": "[]",
    }


class TestSeal:
    """Whoever can write the store cannot change what an approved action runs."""

    @pytest.mark.parametrize("column", sorted(set(_edits()) - {"tool"}))
    def test_an_edited_column_refuses_to_run(self, tmp_path: Path, column: str) -> None:
        """Any sealed fact changed in the SQLite file: approving ends CONFIRMATION_DENIED, no run."""
        world = World()
        stores = open_sqlite_stores(tmp_path / "guard.db")
        try:
            guard = payout_guard(world, approvals=stores.approvals, approval_key="k1")
            principal = Principal.anonymous(role="agent")
            pending = guard.session("s1", principal).execute("payout", PAYOUT)
            with sqlite3.connect(tmp_path / "guard.db") as db:
                db.execute(
                    f"UPDATE approvals SET {column} = ? WHERE id = ?",
                    (_edits()[column], pending.approval_id),
                )
            assert pending.approval_id is not None
            result = guard.approve(pending.approval_id, by="alice")
            assert result.code is Code.CONFIRMATION_DENIED
            assert world.runs == []
        finally:
            stores.close()

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        account=st.text(max_size=30),
        amount=st.integers(min_value=-(2**53), max_value=2**53),
    )
    def test_no_argument_edit_runs(self, tmp_path: Path, account: str, amount: int) -> None:
        """Arguments rewritten to any other value are refused; the original ones still run."""
        world = World()
        path = tmp_path / "arguments.db"
        store = SQLiteApprovalStore(path)
        try:
            guard = payout_guard(world, approvals=store, approval_key="k1")
            session = guard.session(f"s-{len(store.ids())}", Principal(id="U1", role="agent"))
            pending = session.execute("payout", PAYOUT)
            assert pending.approval_id is not None
            action = guard.pending(pending.approval_id)
            assert action is not None
            forged = json.dumps({"account": account, "amount_cents": amount}, separators=(",", ":"))
            with sqlite3.connect(path) as db:
                db.execute(
                    "UPDATE approvals SET arguments = ? WHERE id = ?", (forged, pending.approval_id)
                )
            result = guard.approve(pending.approval_id, by="alice")
            if forged == action.arguments:
                assert result.ok and world.runs[0][1] == PAYOUT
            else:
                assert result.code is Code.CONFIRMATION_DENIED and world.runs == []
        finally:
            store.close()

    def test_the_deployment_key_runs_it_in_another_process(self, tmp_path: Path) -> None:
        """A second guard with the same key (a restart) runs the action; another key refuses it."""
        proposer, runner, stranger = World(), World(), World()
        stores = open_sqlite_stores(tmp_path / "guard.db")
        try:
            first = payout_guard(proposer, approvals=stores.approvals, approval_key="k1")
            pending = first.session("s1", Principal(id="U1", role="agent")).execute(
                "payout", PAYOUT
            )
            assert pending.approval_id is not None
            other = payout_guard(stranger, approvals=stores.approvals, approval_key="k2")
            assert other.approve(pending.approval_id, by="alice").code is Code.CONFIRMATION_DENIED
            assert stranger.runs == []
        finally:
            stores.close()
        stores = open_sqlite_stores(tmp_path / "guard.db")
        try:
            pending2 = payout_guard(proposer, approvals=stores.approvals, approval_key="k1")
            second = pending2.session("s2", Principal(id="U1", role="agent")).execute(
                "payout", PAYOUT
            )
            restarted = payout_guard(runner, approvals=stores.approvals, approval_key="k1")
            assert second.approval_id is not None
            assert restarted.approve(second.approval_id, by="alice").ok
            assert len(runner.runs) == 1
        finally:
            stores.close()

    def test_a_repeat_after_a_restart_without_the_key_files_anew(self, tmp_path: Path) -> None:
        """The model proposes again under a process with another key: a new action it can run."""
        world = World()
        store = SQLiteApprovalStore(tmp_path / "guard.db")
        try:
            before = payout_guard(World(), approvals=store, approval_key="old")
            principal = Principal(id="U1", role="agent")
            first = before.session("s1", principal).execute("payout", PAYOUT)
            after = payout_guard(world, approvals=store, approval_key="new")
            again = after.session("s1", principal).execute("payout", PAYOUT)
            assert again.approval_id is not None and again.approval_id != first.approval_id
            assert after.approve(again.approval_id, by="alice").ok
            assert len(world.runs) == 1
        finally:
            store.close()

    def test_the_masking_key_is_the_default(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without approval_key, $CALLGATE_MASKING_KEY seals: two guards with it agree."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", "deployment")
        world = World()
        store = SQLiteApprovalStore(tmp_path / "guard.db")
        try:
            pending = (
                payout_guard(World(), approvals=store)
                .session("s1", Principal(id="U1", role="agent"))
                .execute("payout", PAYOUT)
            )
            assert pending.approval_id is not None
            assert payout_guard(world, approvals=store).approve(pending.approval_id, by="a").ok
            assert len(world.runs) == 1
        finally:
            store.close()

    def test_an_action_written_before_seals_never_runs(self, tmp_path: Path) -> None:
        """An approvals table of the older layout is migrated; its unsealed rows refuse to run."""
        path = tmp_path / "old.db"
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE approvals (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
                "principal_id TEXT NOT NULL, role TEXT NOT NULL, scopes TEXT NOT NULL, "
                "tool TEXT NOT NULL, arguments TEXT NOT NULL, fingerprint TEXT NOT NULL, "
                "proposal_key TEXT NOT NULL, call_id TEXT, reason TEXT NOT NULL, "
                "created_at REAL NOT NULL, expires_at REAL NOT NULL, state TEXT NOT NULL, "
                "decided_by TEXT, decided_at REAL)"
            )
        path.chmod(0o600)
        world = World()
        store = SQLiteApprovalStore(path)
        try:
            guard = payout_guard(world, approvals=store, approval_key="k1")
            pending = guard.session("s1", Principal(id="U1", role="agent")).execute(
                "payout", PAYOUT
            )
            with sqlite3.connect(path) as db:
                db.execute("UPDATE approvals SET seal = ''")
            assert pending.approval_id is not None
            assert guard.approve(pending.approval_id, by="a").code is Code.CONFIRMATION_DENIED
            assert world.runs == []
        finally:
            store.close()


def _reference_seal(action: PendingAction, key: bytes) -> str:
    """The seal as it was first written: actions filed by older processes carry this one."""
    unsealed = ("state", "decided_by", "decided_at", "seal")
    facts = {name: getattr(action, name) for name in PENDING_ACTION_FIELDS if name not in unsealed}
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


_text = st.text(max_size=12)
_actions = st.builds(
    PendingAction,
    id=_text,
    session_id=_text,
    principal_id=_text,
    role=_text,
    scopes=st.lists(_text, max_size=3).map(tuple),
    tool=_text,
    arguments=_text,
    fingerprint=_text,
    proposal_key=_text,
    call_id=st.none() | _text,
    reason=_text,
    created_at=st.floats(allow_nan=False),
    expires_at=st.floats(allow_nan=False),
    state=st.sampled_from(ApprovalState),
    decided_by=st.none() | _text,
    authenticated=st.booleans(),
    warnings=_text,
    sensitive=st.lists(_text, max_size=3).map(tuple),
)


class TestSealText:
    """The seal's faster path signs the same bytes, and never vouches for an edited copy."""

    @given(action=_actions, key=st.binary(min_size=1, max_size=40))
    def test_the_seal_is_the_reference_seal(self, action: PendingAction, key: bytes) -> None:
        """Any facts (non-ASCII text, None, extreme floats, tuples): the seal equals the original."""
        assert seal(action, key) == _reference_seal(action, key)

    @given(action=_actions, edit=_text)
    def test_a_verified_action_does_not_vouch_for_an_edited_copy(
        self, action: PendingAction, edit: str
    ) -> None:
        """Verified once, the same object verifies again; a copy with one fact changed does not."""
        key = b"k" * 32
        filed = replace(action, seal=seal(action, key))
        assert sealed(filed, key) and sealed(filed, key)
        edited = replace(filed, arguments=filed.arguments + edit + "x")
        assert not sealed(edited, key)
        assert not sealed(filed, b"another key")
        assert sealed(filed, key)

    @given(action=_actions)
    def test_a_copy_that_compares_equal_but_reads_differently_is_checked_anew(
        self, action: PendingAction
    ) -> None:
        """``1 == 1.0 == True``: a copy whose facts compare equal to a verified action's but have
        other types (so other seal text) is verified from its bytes, never vouched for."""
        key = b"k" * 32
        filed = replace(action, created_at=1.0, authenticated=True)
        filed = replace(filed, seal=seal(filed, key))
        assert sealed(filed, key)
        for retyped in (replace(filed, created_at=1), replace(filed, authenticated=1)):
            assert retyped == filed  # equal, as Python compares them
            assert not sealed(retyped, key)

    def test_an_approval_signs_its_facts_once(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Filed, decided and resumed, the action is three copies of the same facts: signed once."""
        import guard.stages.confirm as confirm

        signed: list[int] = []
        sign = confirm._sign
        monkeypatch.setattr(confirm, "_sign", lambda *a: signed.append(1) or sign(*a))
        world = World()
        guard = payout_guard(world)
        session = guard.session("s1", Principal(id="u1", role="agent"))
        pending = session.execute("payout", PAYOUT)
        assert pending.approval_id is not None, pending
        assert guard.approve(pending.approval_id, by="ops-lead").ok
        assert (len(signed), len(world.runs)) == (1, 1)
