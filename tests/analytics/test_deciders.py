"""The deciders' names, read from the approvals store the guard wrote (SQLite file, real Redis).

analytics reads the store by its layout, without the guard's classes; these tests write through the
guard's own stores and read back through ``analytics.deciders``, so the two cannot drift apart.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from analytics.deciders import StoreUnreadable, decider_names
from guard.stores import Stores, open_sqlite_stores
from tests.guard.stores.conftest import redis_url
from tests.guard.stores.test_approvals import action

__all__ = ["redis_url"]


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Stores]]:
    """The spec a responder passes (``--store``) and the guard's stores on it."""
    if request.param == "sqlite":
        path = tmp_path / "approvals.db"
        with open_sqlite_stores(path) as stores:
            yield str(path), stores
        return
    from guard.stores.redis import open_redis_stores

    url = request.getfixturevalue("redis_url")
    with open_redis_stores(url) as stores:
        yield url, stores


class TestNames:
    """Decided approvals give their decider; pending, unknown and expired ones give none."""

    def test_decided_ones_are_named(self, store: tuple[str, Stores], tmp_path: Path) -> None:
        """Approved and denied carry their decider; a pending one and an unknown id do not."""
        spec, stores = store
        suffix = tmp_path.name[-8:]  # one Redis serves every test: ids of this test's own
        ids = [f"apr_{suffix}_{n}" for n in range(3)]
        for n, approval_id in enumerate(ids):
            stores.approvals.create(action(id=approval_id, proposal_key=f"k{suffix}{n}"))
        stores.approvals.decide(ids[0], approve=True, by="alice", now=1.0)
        stores.approvals.decide(ids[1], approve=False, by="bob", now=1.0)
        names = decider_names(spec, [*ids, f"apr_{suffix}_unknown"])
        assert names == {ids[0]: "alice", ids[1]: "bob"}

    def test_many_ids_in_one_read(self, store: tuple[str, Stores], tmp_path: Path) -> None:
        """More ids than one SQLite statement may bind are read in batches, none lost."""
        spec, stores = store
        suffix = tmp_path.name[-8:]
        ids = [f"apr_{suffix}_{n}" for n in range(1_200)]
        for n, approval_id in enumerate(ids):
            stores.approvals.create(action(id=approval_id, proposal_key=f"m{suffix}{n}"))
            stores.approvals.decide(approval_id, approve=True, by=f"a{n}", now=1.0)
        names = decider_names(spec, ids)
        assert len(names) == 1_200 and names[ids[-1]] == "a1199"


class TestReadOnly:
    """A reader never creates, changes or needs write access to a store."""

    def test_a_missing_file_is_not_created(self, tmp_path: Path) -> None:
        """A path with no store: one line, and no file appears."""
        path = tmp_path / "nothing.db"
        with pytest.raises(StoreUnreadable, match="no approvals store at"):
            decider_names(str(path), ["apr_1"])
        assert not path.exists()

    def test_a_read_only_file_is_read(self, tmp_path: Path) -> None:
        """A store the responder may only read (mode 0400) still names its deciders."""
        path = tmp_path / "approvals.db"
        with open_sqlite_stores(path) as stores:
            stores.approvals.create(action(id="apr_ro"))
            stores.approvals.decide("apr_ro", approve=False, by="carol", now=1.0)
        path.chmod(0o400)
        assert decider_names(str(path), ["apr_ro"]) == {"apr_ro": "carol"}

    @pytest.mark.parametrize(
        "content", [b"not a database\n" * 100, b"", b"SQLite format 3\x00" + b"\xff" * 200]
    )
    def test_another_kind_of_file_is_one_line(self, tmp_path: Path, content: bytes) -> None:
        """Text, an empty file, a corrupt header, a SQLite file of something else: StoreUnreadable."""
        path = tmp_path / "other.db"
        path.write_bytes(content)
        with pytest.raises(StoreUnreadable) as caught:
            decider_names(str(path), ["apr_1"])
        assert "\n" not in str(caught.value) and str(path) in str(caught.value)

    def test_a_sqlite_file_without_approvals(self, tmp_path: Path) -> None:
        """A SQLite database that is not a callgate store is named as such."""
        path = tmp_path / "other.db"
        sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
        with pytest.raises(StoreUnreadable, match="not a callgate approvals store"):
            decider_names(str(path), ["apr_1"])

    def test_an_unreachable_redis_is_one_line(self) -> None:
        """A Redis nobody listens on: StoreUnreadable naming the URL without its password."""
        with pytest.raises(StoreUnreadable) as caught:
            decider_names("redis://:hunter2@127.0.0.1:1/0", ["apr_1"])
        assert "hunter2" not in str(caught.value) and "127.0.0.1:1" in str(caught.value)
