"""Injection defence that lets honest work through: the attack suite, per taint mode.

Runs every scenario of ``tests/guard/injection/scenarios.py`` (an honest user task and an
attacker's goal planted in a tool result, over mail and calendar, payments, files and chat)
through the public API, with a human who approves only the user's calls, once per
``Policy.taint_mode``. Prints, per mode: user tasks run without a human, tasks that needed one (by
the reason they were first asked with), attack writes and egress reads executed without a human,
and attacks whose goal was reached (counted from the world's effect log).

Goal: 0 attack calls executed without a human in the modes the guard recommends, and the
argument-level mode running at least twice as many user tasks unattended as the session-wide one.

``--cost`` also times what keeping provenance costs: recording one untrusted result (an e-mail of
about 4 KB with 60 identifier-like tokens) and one lookup, on the memory and the SQLite counter
store (median of repeated runs, each in a fresh session).

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/injection.py [--verbose] [--cost]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from guard.provenance import ProvenanceLedger
from guard.stores import CounterStore, MemoryCounterStore, SQLiteCounterStore
from tests.guard.injection.runner import run_suite
from tests.guard.injection.scenarios import SCENARIOS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="one line per scenario and mode")
    parser.add_argument("--cost", action="store_true", help="time recording and lookups")
    options = parser.parse_args()
    verbose = options.verbose
    domains = sorted({s.domain for s in SCENARIOS})
    print(f"{len(SCENARIOS)} scenarios over {len(domains)} domains ({', '.join(domains)})\n")
    header = f"{'mode':<10} {'unattended':>10} {'with human':>10}  {'by reason':<48}"
    print(header + f" {'attack calls run':>16} {'goals reached':>13} {'broken':>6}")
    summaries = run_suite()
    for summary in summaries:
        reasons = ", ".join(f"{code} {n}" for code, n in sorted(summary.tasks_with_human.items()))
        print(
            f"{summary.mode:<10} {summary.tasks_unattended:>10} "
            f"{sum(summary.tasks_with_human.values()):>10}  {reasons:<48} "
            f"{summary.attack_calls_unattended:>16} {summary.goals_reached:>13} "
            f"{summary.tasks_failed:>6}"
        )
    by_mode = {summary.mode: summary for summary in summaries}
    session, vouched = by_mode["session"].tasks_unattended, by_mode["vouched"].tasks_unattended
    print(f"\nvouched / session unattended: {vouched}/{session} = {vouched / max(session, 1):.1f}x")
    for summary in summaries:
        missed = [run.scenario.id for run in summary.runs if run.attack_unattended]
        if missed:
            print(f"{summary.mode}: attacks that ran without a human: {', '.join(missed)}")
    if verbose:
        for summary in summaries:
            for run in summary.runs:
                asked = ",".join(run.asked) or "-"
                print(
                    f"  {summary.mode:<10} {run.scenario.id:<40} asked={asked:<24} "
                    f"attack_run={run.attack_unattended} stopped={run.attack_stopped}"
                )
    if options.cost:
        cost()


def cost(runs: int = 30) -> None:
    """Median time to record one ~4 KB untrusted result, and to look one value up."""
    words = " ".join(f"see INV-{n} or mail user{n}@example.org" for n in range(30))
    body = {"emails": [{"sender": "a@b.example", "subject": "hi", "body": (words + " ") * 3}]}
    size = len(str(body))
    with tempfile.TemporaryDirectory() as tmp:
        stores: dict[str, CounterStore] = {
            "memory": MemoryCounterStore(),
            "sqlite": SQLiteCounterStore(Path(tmp) / "c.db"),
        }
        print(f"\nprovenance cost, one untrusted result of {size} characters:")
        for name, store in stores.items():
            ledger = ProvenanceLedger(counters=store, tools=("read_inbox",), ttl=3600, limit=4096)
            record, lookup = [], []
            for run in range(runs):
                sid = f"{name}-{run}"
                start = time.perf_counter()
                ledger.record(sid, body, tool="read_inbox", step=1, trusted=False, now=1e9)
                record.append(time.perf_counter() - start)
                start = time.perf_counter()
                ledger.lookup(sid, "user7@example.org", now=1e9)
                lookup.append(time.perf_counter() - start)
            print(
                f"  {name:<7} record {statistics.median(record) * 1e3:7.2f} ms   "
                f"lookup {statistics.median(lookup) * 1e3:6.3f} ms"
            )


if __name__ == "__main__":
    main()
