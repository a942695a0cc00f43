"""The soak smoke run: a minute of agents, store, trail, sidecar and loader under seeded faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

INVARIANTS = (
    "write applied at most once per key",
    "applied write never reported not_applied",
    "applied write unreported only if its agent was killed",
    "write reported applied is in the ledger",
    "unknown outcome settled as the ledger says",
    "acknowledged span on the sidecar's disk",
    "acknowledged span in DuckDB",
    "acknowledged span has its trail copy's ids",
    "span in DuckDB exactly once",
    "trail span on disk is in DuckDB",
    "every span on disk loaded or in load_errors",
    "counts add up per agent (trail + lost = acked + dropped; written = on disk)",
    "approval decided during a kill runs once, by another process",
    "verify passes on every chain no fault hit",
    "verify names the break on chains a fault hit",
    "peak RSS within bounds",
    "loader lag back under",
    "no process died unless killed; agents exit 0",
)

FAULTS = (
    "agent_kill",
    "sidecar_worker_kill",
    "loader_kill",
    "collector_down",
    "disk_full",
    "clock",
    "approval_kill",
)


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One 60 s run of bench/soak.py; its printed output and its results."""
    home = tmp_path_factory.mktemp("soak")
    out = home / "results.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--seconds",
            "60",
            "--seed",
            "1",
            "--home",
            str(home / "run"),
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        timeout=280,
    )
    assert out.exists(), done.stdout + done.stderr
    return {"status": done.returncode, "output": done.stdout, **json.loads(out.read_text())}


class TestSoakSmoke:
    def test_every_fault_kind_was_injected(self, soak: dict[str, Any]) -> None:
        """The seeded schedule holds every kind of fault, printed at the start, and each ran."""
        assert "fault schedule:" in soak["output"]
        for kind in FAULTS:
            assert soak["faults"].get(kind, 0) >= 1, soak["faults"]
            assert kind in soak["output"]
        assert not any("skipped" in window for window in soak["windows"]), soak["windows"]

    def test_the_run_did_work(self, soak: dict[str, Any]) -> None:
        """Calls ran, writes applied, unknown outcomes were settled, spans reached both databases."""
        assert soak["effects"]["calls_reported"] > 500
        assert soak["effects"]["applied_writes"] > 100
        assert soak["effects"]["unknown_keys"] > 0
        assert soak["effects"]["unknown_settled"] > 0
        assert soak["spans"]["db_spans"] > 1000 and soak["spans"]["trail_db_spans"] > 1000

    @pytest.mark.parametrize("name", INVARIANTS)
    def test_invariant_holds(self, soak: dict[str, Any], name: str) -> None:
        """Each invariant is checked and holds."""
        rows = [row for row in soak["invariants"] if row["invariant"].startswith(name)]
        assert len(rows) == 1, [row["invariant"] for row in soak["invariants"]]
        assert rows[0]["ok"], rows[0]

    def test_exit_status_says_all_held(self, soak: dict[str, Any]) -> None:
        """The run exits 0 and prints the invariant table."""
        assert soak["status"] == 0, soak["output"]
        assert "invariant" in soak["output"] and "FAIL" not in soak["output"]
