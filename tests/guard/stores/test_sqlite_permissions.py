"""The SQLite store file: created for its owner only, and refused when others may write it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from guard.stores import SQLiteApprovalStore, SQLiteCounterStore, open_sqlite_stores
from tests.guard.stores.test_approvals import action


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class TestFileMode:
    """Approvals hold exact arguments, and whoever writes the file can approve: keep it private."""

    @pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
    def test_created_0600_with_its_journal(self, tmp_path: Path, umask: int) -> None:
        """A new store file, its -wal and -shm are 0600 whatever the umask lets through."""
        path = tmp_path / "guard.db"
        previous = os.umask(umask)
        try:
            stores = open_sqlite_stores(path)
        finally:
            os.umask(previous)
        try:
            stores.approvals.create(action())
            for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                assert mode(name) & 0o077 == 0, (name, oct(mode(name)))
        finally:
            stores.close()

    @pytest.mark.parametrize("bits", [0o020, 0o002, 0o022, 0o666, 0o777])
    @pytest.mark.parametrize("which", ["", "-wal", "-shm"])
    def test_writable_by_others_is_refused(self, tmp_path: Path, bits: int, which: str) -> None:
        """A file, -wal or -shm the group or others may write is refused; nothing is opened."""
        path = tmp_path / "guard.db"
        open_sqlite_stores(path).close()
        target = Path(f"{path}{which}")
        target.touch()
        target.chmod(0o600 | bits)
        with pytest.raises(PermissionError, match="allow_writable_file"):
            open_sqlite_stores(path)
        with pytest.raises(PermissionError):
            SQLiteApprovalStore(path)
        with pytest.raises(PermissionError):
            SQLiteCounterStore(path)

    def test_the_flag_opens_a_shared_file(self, tmp_path: Path) -> None:
        """``allow_writable_file=True`` is the host saying the group may write it."""
        path = tmp_path / "guard.db"
        path.touch()
        path.chmod(0o660)
        with open_sqlite_stores(path, allow_writable_file=True) as stores:
            stores.approvals.create(action())
            assert stores.approvals.get("apr_1") is not None

    def test_readable_by_others_is_left_to_the_host(self, tmp_path: Path) -> None:
        """An existing 0644 file opens (reading does not let anyone approve), and keeps its mode."""
        path = tmp_path / "guard.db"
        path.touch()
        path.chmod(0o644)
        open_sqlite_stores(path).close()
        assert mode(path) == 0o644
