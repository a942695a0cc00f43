"""The ApprovalStore contract, run against every backend."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from guard.stores import (
    ApprovalState,
    ApprovalStore,
    MemoryApprovalStore,
    PendingAction,
    SQLiteApprovalStore,
)
from guard.stores.redis import RedisApprovalStore
from tests.guard.stores.threads import run_together

RETENTION = 100.0
"""How long both backends keep decided or expired actions in these tests."""


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ApprovalStore]:
    if request.param == "memory":
        yield MemoryApprovalStore(retention=RETENTION)
        return
    if request.param == "redis":
        yield RedisApprovalStore(request.getfixturevalue("redis_client"), retention=RETENTION)
        return
    sqlite_store = SQLiteApprovalStore(tmp_path / "stores.db", retention=RETENTION)
    yield sqlite_store
    sqlite_store.close()


def action(**overrides: Any) -> PendingAction:
    """A pending refund created at t=0 that expires at t=900."""
    fields: dict[str, Any] = {
        "id": "apr_1",
        "session_id": "s1",
        "principal_id": "u1",
        "role": "support",
        "scopes": ("orders:read", "refunds:write"),
        "tool": "refund",
        "arguments": '{"amount_cents":500,"order_id":"o1"}',
        "fingerprint": "fp1",
        "proposal_key": "prop1",
        "call_id": "call_1",
        "reason": "CONFIRMATION_REQUIRED",
        "created_at": 0.0,
        "expires_at": 900.0,
    }
    fields.update(overrides)
    return PendingAction(**fields)


class TestCreateAndGet:
    def test_get_returns_the_created_action(self, store: ApprovalStore) -> None:
        """An action reads back equal to what was stored, every field included."""
        store.create(action())
        assert store.get("apr_1") == action()

    def test_get_keeps_optional_fields_empty(self, store: ApprovalStore) -> None:
        """A missing call id and empty scopes survive the round trip."""
        store.create(action(call_id=None, scopes=()))
        assert store.get("apr_1") == action(call_id=None, scopes=())

    def test_ids_list_every_action_in_any_state(self, store: ApprovalStore) -> None:
        """ids() names every stored action, pending or decided, and nothing else."""
        assert store.ids() == []
        store.create(action())
        store.create(action(id="apr_2", proposal_key="prop2"))
        store.decide("apr_2", approve=False, by="alice", now=10.0)
        assert sorted(store.ids()) == ["apr_1", "apr_2"]

    def test_get_of_unknown_id_is_none(self, store: ApprovalStore) -> None:
        """An id never created reads as None."""
        assert store.get("apr_missing") is None

    def test_create_with_existing_id_raises(self, store: ApprovalStore) -> None:
        """Ids are unique: reusing one is a bug, reported as ValueError."""
        store.create(action())
        with pytest.raises(ValueError, match="apr_1"):
            store.create(action(tool="other"))

    def test_get_returns_the_action_whatever_its_state(self, store: ApprovalStore) -> None:
        """A decided action is still readable."""
        store.create(action())
        store.decide("apr_1", approve=False, by="alice", now=1.0)
        found = store.get("apr_1")
        assert found is not None and found.state is ApprovalState.DENIED


class TestFindPending:
    def test_finds_the_pending_action_for_a_proposal(self, store: ApprovalStore) -> None:
        """A repeated proposal finds the action already waiting."""
        store.create(action())
        assert store.find_pending("prop1", now=10.0) == action()

    def test_unknown_proposal_finds_nothing(self, store: ApprovalStore) -> None:
        """Another proposal key does not match."""
        store.create(action())
        assert store.find_pending("prop2", now=10.0) is None

    def test_expired_action_is_not_found(self, store: ApprovalStore) -> None:
        """An action is found through its expiry instant, not after."""
        store.create(action())
        assert store.find_pending("prop1", now=900.0) is not None
        assert store.find_pending("prop1", now=900.5) is None

    def test_decided_action_is_not_found(self, store: ApprovalStore) -> None:
        """Once decided, a proposal must ask afresh."""
        store.create(action())
        store.decide("apr_1", approve=True, by="alice", now=1.0)
        assert store.find_pending("prop1", now=2.0) is None

    def test_finds_a_newer_action_after_an_older_was_decided(self, store: ApprovalStore) -> None:
        """A fresh action for the same proposal is found once the old one is decided."""
        store.create(action())
        store.decide("apr_1", approve=False, by="alice", now=1.0)
        store.create(action(id="apr_2", created_at=2.0, expires_at=902.0))
        found = store.find_pending("prop1", now=3.0)
        assert found is not None and found.id == "apr_2"


class TestFile:
    def test_files_the_action_when_none_is_pending(self, store: ApprovalStore) -> None:
        """No pending action for the proposal: the given one is stored and returned."""
        assert store.file(action(), now=0.0) == action()
        assert store.get("apr_1") == action() and store.filed("prop1") == [action()]

    def test_finds_the_pending_one_and_stores_nothing(self, store: ApprovalStore) -> None:
        """A repeated proposal gets the action already waiting; the new one is not kept."""
        store.create(action())
        assert store.file(action(id="apr_2", created_at=5.0), now=5.0) == action()
        assert store.get("apr_2") is None and store.ids() == ["apr_1"]

    def test_a_decided_or_expired_one_is_filed_anew(self, store: ApprovalStore) -> None:
        """Only an unexpired pending action is found: otherwise the new one is filed."""
        store.create(action())
        store.create(action(id="apr_old", proposal_key="prop2", expires_at=1.0))
        store.decide("apr_1", approve=False, by="alice", now=1.0)
        fresh = action(id="apr_2", created_at=2.0, expires_at=902.0)
        assert store.file(fresh, now=2.0) == fresh
        late = action(id="apr_3", proposal_key="prop2", created_at=2.0, expires_at=902.0)
        assert store.file(late, now=2.0) == late
        assert [a.id for a in store.filed("prop1")] == ["apr_1", "apr_2"]

    def test_an_existing_id_is_refused(self, store: ApprovalStore) -> None:
        """Filing under an id the store holds (another proposal's) raises, as create does."""
        store.create(action(proposal_key="other"))
        with pytest.raises(ValueError, match="already exists"):
            store.file(action(), now=0.0)

    def test_racing_identical_proposals_file_one_action(self, store: ApprovalStore) -> None:
        """Threads filing the same proposal at once all get one action, and one is stored."""
        got = run_together(8, lambda i: store.file(action(id=f"apr_{i}"), now=0.0))
        assert len({found.id for found in got}) == 1 and len(store.ids()) == 1


class TestDecide:
    def test_approve_records_who_and_when(self, store: ApprovalStore) -> None:
        """Approving moves PENDING to APPROVED with the approver and time, and persists it."""
        store.create(action())
        decided = store.decide("apr_1", approve=True, by="alice", now=5.0)
        expected = action().decided(ApprovalState.APPROVED, by="alice", at=5.0)
        assert decided == expected
        assert store.get("apr_1") == expected

    def test_deny_records_who_and_when(self, store: ApprovalStore) -> None:
        """Denying moves PENDING to DENIED with the approver and time."""
        store.create(action())
        decided = store.decide("apr_1", approve=False, by="bob", now=5.0)
        assert decided == action().decided(ApprovalState.DENIED, by="bob", at=5.0)

    def test_decision_after_expiry_expires_the_action(self, store: ApprovalStore) -> None:
        """Deciding after expires_at yields EXPIRED, attributed to nobody."""
        store.create(action())
        decided = store.decide("apr_1", approve=True, by="alice", now=901.0)
        assert decided == action().decided(ApprovalState.EXPIRED, by=None, at=901.0)

    def test_decision_at_expiry_instant_still_counts(self, store: ApprovalStore) -> None:
        """At exactly expires_at the action can still be approved."""
        store.create(action())
        decided = store.decide("apr_1", approve=True, by="alice", now=900.0)
        assert decided is not None and decided.state is ApprovalState.APPROVED

    def test_second_decision_returns_the_first(self, store: ApprovalStore) -> None:
        """Deciding twice changes nothing: the first decision is returned unchanged."""
        store.create(action())
        first = store.decide("apr_1", approve=True, by="alice", now=5.0)
        second = store.decide("apr_1", approve=False, by="bob", now=6.0)
        assert second == first
        assert store.get("apr_1") == first

    def test_decide_unknown_id_is_none(self, store: ApprovalStore) -> None:
        """Deciding an unknown action returns None."""
        assert store.decide("apr_missing", approve=True, by="alice", now=0.0) is None

    def test_racing_approvers_get_one_decision(self, store: ApprovalStore) -> None:
        """Eight approvers deciding at once all see the same single decision."""
        store.create(action())
        results = run_together(
            8, lambda i: store.decide("apr_1", approve=i % 2 == 0, by=f"a{i}", now=float(i))
        )
        assert len(set(results)) == 1
        assert results[0] == store.get("apr_1")


class TestPurge:
    def test_purge_keeps_actions_within_retention(self, store: ApprovalStore) -> None:
        """Pending, and recently expired or decided actions, are kept."""
        store.create(action())
        store.create(action(id="apr_2", proposal_key="prop2"))
        store.decide("apr_2", approve=True, by="alice", now=1.0)
        assert store.purge(900.0 + RETENTION) == 0
        assert store.get("apr_1") is not None and store.get("apr_2") is not None

    def test_purge_deletes_actions_past_retention(self, store: ApprovalStore) -> None:
        """An action is deleted once retention has passed since its expiry."""
        store.create(action())
        store.create(action(id="apr_2", proposal_key="prop2", expires_at=5000.0))
        assert store.purge(900.0 + RETENTION + 1.0) == 1
        assert store.get("apr_1") is None
        assert store.get("apr_2") is not None

    def test_retention_runs_from_a_late_decision(self, store: ApprovalStore) -> None:
        """An action decided (expired) after its expiry is kept retention s from the decision."""
        store.create(action())
        store.decide("apr_1", approve=True, by="alice", now=950.0)
        assert store.purge(900.0 + RETENTION + 1.0) == 0
        assert store.purge(950.0 + RETENTION + 1.0) == 1

    def test_purged_proposal_finds_nothing(self, store: ApprovalStore) -> None:
        """A purged action is gone from find_pending too."""
        store.create(action())
        store.purge(2000.0)
        assert store.find_pending("prop1", now=0.0) is None

    def test_purge_of_created_decided_action(self, store: ApprovalStore) -> None:
        """An action stored already decided is purged by its decision time too."""
        decided = replace(action(), state=ApprovalState.DENIED, decided_by="x", decided_at=10.0)
        store.create(decided)
        assert store.get("apr_1") == decided
        assert store.purge(900.0 + RETENTION + 1.0) == 1


class TestDecided:
    def test_decided_changes_only_the_decision(self) -> None:
        """PendingAction.decided equals dataclasses.replace of the three decision fields, for
        every field the dataclass has (so a new field cannot be forgotten)."""
        import dataclasses

        action = PendingAction(
            **{
                f.name: (
                    0.5
                    if f.type in ("float", "float | None")
                    else ("x",)
                    if f.name == "scopes"
                    else f"v-{f.name}"
                )
                for f in dataclasses.fields(PendingAction)
                if f.name not in ("state", "decided_by", "decided_at")
            }
        )
        decided = action.decided(ApprovalState.APPROVED, by="h", at=9.0)
        assert decided == dataclasses.replace(
            action, state=ApprovalState.APPROVED, decided_by="h", decided_at=9.0
        )


class TestFacts:
    """The facts added to pending actions round-trip through every backend, and ``filed`` finds them."""

    def test_facts_round_trip(self, store: ApprovalStore) -> None:
        """Identification, warnings (any text), sensitive names and the seal come back as stored."""
        written = action(
            authenticated=False,
            warnings='[{"code":"LATE","message":"\\u202e\\n\\u0000 ok"}]',
            sensitive=("account", "pin"),
            seal="ab" * 32,
        )
        store.create(written)
        assert store.get("apr_1") == written
        decided = store.decide("apr_1", approve=True, by="alice", now=10.0)
        assert decided is not None and decided.seal == written.seal
        assert decided.authenticated is False and decided.sensitive == ("account", "pin")
        assert store.get("apr_1") == decided

    def test_filed_lists_a_proposal_in_any_state_oldest_first(self, store: ApprovalStore) -> None:
        """Every action under a proposal key, decided or expired, in creation order; others apart."""
        store.create(action(id="apr_1", created_at=0.0, expires_at=10.0))
        store.create(action(id="apr_2", created_at=20.0, expires_at=900.0))
        store.create(action(id="apr_3", proposal_key="prop2"))
        store.decide("apr_1", approve=True, by="alice", now=15.0)  # too late: expired
        assert [a.id for a in store.filed("prop1")] == ["apr_1", "apr_2"]
        assert [str(a.state) for a in store.filed("prop1")] == ["expired", "pending"]
        assert store.filed("nothing") == []
