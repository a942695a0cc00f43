"""A soak and chaos run: agents, a shared store, the trail, the sidecar and the loader under faults.

::

    python bench/soak.py --seconds 60                  # the smoke run (make test runs it)
    python bench/soak.py --seconds 600 --seed 3        # the 10-minute setting
    python bench/soak.py --seconds 3600 --store redis  # an hour, on a real redis-server

N agent processes (``bench/soak_agent.py``) make a seeded mix of reads, writes (to a backend that
deduplicates and to one that does not), retries, repeats, approvals and denials through the guard's
SQLite stores (or a ``redis-server`` the harness starts), each exporting its spans to its own trail
directory and over OTLP/HTTP to ``callgate sidecar --processes 2``; ``callgate load --follow``
loads the sidecar's and the agents' files into DuckDB. Faults come from a schedule drawn from the
seed and printed at the start: SIGKILL of an agent mid-call (restarted), of a sidecar worker, of
the loader (restarted); the sidecar stopped for a while and restarted on its port (the collector
away); a full disk (a tmpfs filled) under one agent's trail and under the sidecar's directory;
redis-server restarted; steps of the agents' clocks. At the end the invariants are checked from
outside (``bench/soak_check.py``), printed as a table, and the exit status is 1 if one failed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The repository root before bench/: bench/analytics.py must not stand in for the package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import soak_check
import soak_procs as procs
from soak_domain import MASKING_KEY, PHASE_COMMITTED, PHASE_PENDING, PHASE_UNCOMMITTED

RSS_BOUND_MIB = {"agent": 300, "sidecar": 300, "sidecar-worker": 300, "loader": 600, "redis": 200}
"""Peak resident memory each long-lived process must stay under, MiB."""

LAG_BOUND_S = 60.0
"""After each fault ends, the loader must have taken in every byte then on disk within this (the
figure for a 2-core machine that other work shares; `--lag-bound` to tighten it)."""


@dataclass(frozen=True, kw_only=True)
class Fault:
    at: float
    kind: str
    duration: float = 0.0
    agent: int = -1
    delta: float = 0.0
    target: str = ""

    def describe(self) -> str:
        extra = {
            "agent_kill": f"agent {self.agent}, effect {self.target}",
            "approval_kill": f"agent {self.agent}, approval pending",
            "clock": f"agent {self.agent} clock {self.delta:+.0f} s",
            "disk_full": f"{self.target} for {self.duration:.0f} s",
            "collector_down": f"for {self.duration:.0f} s",
        }.get(self.kind, "")
        return f"t={self.at:6.1f}s  {self.kind:<20} {extra}"


def schedule(seed: int, seconds: float, agents: int, store: str) -> list[Fault]:
    """The faults of a run: every kind at least once, spread over the middle of the run."""
    rng = random.Random(seed)
    rounds = max(1, int(seconds // 60))
    kinds = ["agent_kill", "agent_kill", "sidecar_worker_kill", "loader_kill", "collector_down",
             "disk_full", "disk_full", "clock", "clock", "clock", "approval_kill"]  # fmt: skip
    if store == "redis":
        kinds.append("redis_restart")
    faults: list[Fault] = []
    for round_ in range(rounds):
        start, span = round_ * seconds / rounds, seconds / rounds
        for n, kind in enumerate(kinds):
            at = round(start + span * (0.1 + 0.75 * rng.random()), 1)
            if kind == "clock":
                delta = rng.choice([90.0, -30.0, 1000.0])
                faults.append(Fault(at=at, kind=kind, agent=rng.randrange(agents), delta=delta))
            elif kind == "agent_kill":
                target = "committed" if n % 2 == 0 else "uncommitted"
                faults.append(Fault(at=at, kind=kind, agent=rng.randrange(agents), target=target))
            elif kind == "approval_kill":  # early in its round: the agent must still be proposing
                at = round(start + (at - start) / 2, 1)
                faults.append(Fault(at=at, kind=kind, agent=rng.randrange(agents)))
            elif kind == "disk_full":
                target = "trail" if n % 2 == 0 else "sidecar"
                faults.append(Fault(at=at, kind=kind, duration=4.0, target=target))
            elif kind == "collector_down":
                faults.append(Fault(at=at, kind=kind, duration=4.0))
            else:
                faults.append(Fault(at=at, kind=kind))
    return sorted(faults, key=lambda f: f.at)


@dataclass
class Run:
    """The live state of a run: processes, disks, what happened when."""

    home: Path
    args: argparse.Namespace
    t0: float = 0.0
    agents: list[procs.Proc] = field(default_factory=list)
    sidecar: procs.Proc | None = None
    loader: procs.Proc | None = None
    redis: procs.Proc | None = None
    disks: dict[str, procs.Disk] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)
    """Every fault as it happened: kind, start, end, pids hit, details."""
    peak_kib: dict[str, int] = field(default_factory=dict)
    lags: list[dict[str, Any]] = field(default_factory=list)
    pending_lags: list[tuple[str, float, dict[str, int]]] = field(default_factory=list)
    worker_pids: set[int] = field(default_factory=set)
    filling: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Open disk-full windows (target, window): a writer started meanwhile is hit too."""
    unexpected_exits: list[str] = field(default_factory=list)

    def now(self) -> float:
        return time.time() - self.t0

    # -- measuring --------------------------------------------------------------------------------

    def sample(self) -> None:
        """Peak RSS per role, sidecar workers apart; notes the workers' pids."""
        roles: list[tuple[str, int]] = [("agent", a.pid) for a in self.agents if a.alive()]
        for proc, role in ((self.loader, "loader"), (self.redis, "redis")):
            if proc is not None and proc.alive():
                roles.append((role, proc.pid))
        if self.sidecar is not None and self.sidecar.alive():
            roles.append(("sidecar", self.sidecar.pid))
            for child in procs.children(self.sidecar.pid):
                if "resource_tracker" not in procs.cmdline(child):
                    roles.append(("sidecar-worker", child))
                    self.worker_pids.add(child)
        for role, pid in roles:
            self.peak_kib[role] = max(self.peak_kib.get(role, 0), procs.rss_kib(pid))
        for target, window in self.filling:
            self._hit_writers(target, window)

    def _hit_writers(self, target: str, window: dict[str, Any]) -> None:
        """Add the writers on ``target`` now to a disk-full window: a sidecar restarted or an
        agent restarted while the disk is full writes its first file onto it (the soak's one
        unexplained empty file was a worker started in such a window, not counted as hit)."""
        window["pids"].extend(pid for pid in self._writers(target) if pid not in window["pids"])

    def mark_lag(self, label: str) -> None:
        """From now, time how long until the database holds every byte now on disk."""
        self.pending_lags.append((label, time.monotonic(), soak_check.whole_line_sizes(self.home)))

    def poll_lags(self, *, block: bool = False) -> None:
        while self.pending_lags:
            label, since, sizes = self.pending_lags[0]
            behind = soak_check.bytes_behind(self.home, sizes)
            waited = time.monotonic() - since
            if behind is not None and behind == 0:
                self.lags.append({"after": label, "lag_s": round(waited, 2)})
            elif waited > self.args.lag_bound * 2:
                self.lags.append({"after": label, "lag_s": None, "behind_bytes": behind})
            elif block:
                time.sleep(0.25)
                continue
            else:
                return
            self.pending_lags.pop(0)

    # -- faults -----------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> Callable[[], None] | None:
        """Start a fault; for one with a window, returns what ends it (called ``duration`` later)."""
        window: dict[str, Any] = {"kind": fault.kind, "start": round(self.now(), 2), "pids": []}
        self.windows.append(window)
        ending: Callable[[], None] | None = None
        if fault.kind == "agent_kill":
            proc = self.agents[fault.agent]
            # Half the kills land with the effect written and not committed, half after the
            # commit and before the answer (the unknown outcome).
            phases = (PHASE_COMMITTED,) if fault.target == "committed" else (PHASE_UNCOMMITTED,)
            window["phase"] = soak_check.wait_mid_call(self.home, fault.agent, 3.0, phases)
            window["pids"].append(proc.kill())
            soak_check.clear_phase(self.home, fault.agent)
            proc.start()
        elif fault.kind == "approval_kill":
            self._approve_while_dead(fault.agent, window)
        elif fault.kind == "sidecar_worker_kill":
            assert self.sidecar is not None
            worker = procs.sidecar_worker(self.sidecar.pid)
            if worker is not None:
                procs.os.kill(worker, procs.signal.SIGKILL)
                window["pids"].append(worker)
        elif fault.kind == "loader_kill":
            assert self.loader is not None
            window["pids"].append(self.loader.kill())
            self.loader.start()
        elif fault.kind == "redis_restart":
            assert self.redis is not None
            window["pids"].append(self.redis.kill())
            self.redis.start()
            procs.wait_port(self.args.redis_port)
        elif fault.kind == "collector_down":
            sidecar = self.sidecar
            assert sidecar is not None
            sidecar.stop()

            def ending() -> None:
                sidecar.start()
                procs.wait_port(self.args.sidecar_port)

        elif fault.kind == "disk_full":
            disk = self.disks.get(fault.target)
            if disk is None or not disk.mounted:
                window["skipped"] = "no tmpfs (mount needs root)"
            else:
                disk.fill()
                window["pids"] = self._writers(fault.target)
                filling = (fault.target, window)
                self.filling.append(filling)

                def ending() -> None:
                    self._hit_writers(*filling)
                    self.filling.remove(filling)
                    disk.free()

        elif fault.kind == "clock":
            window.update(agent=fault.agent, delta=fault.delta)

        def close() -> None:
            if ending is not None:
                ending()
            window["end"] = round(self.now(), 2)
            if fault.kind != "clock":
                self.mark_lag(f"{fault.kind}@{fault.at:.0f}s")

        if fault.duration <= 0:
            close()
            return None
        return close

    def _approve_while_dead(self, agent: int, window: dict[str, Any]) -> None:
        """SIGKILL the agent while it holds a pending approval, approve that approval as a human
        would (``callgate approvals approve`` on the store) while no incarnation runs, then
        restart it: the new process must run the approved call once (reported ``resumed``)."""
        proc, home = self.agents[agent], self.home
        hold = home / "agents" / str(agent) / "hold"
        hold.touch()  # the agent waits at its next pending approval until killed
        try:
            seen = soak_check.wait_mid_call(home, agent, 30.0, (PHASE_PENDING,))
            window["pids"].append(proc.kill())
            caught = seen == PHASE_PENDING and soak_check.phase_of(home, agent) == PHASE_PENDING
            # The dead incarnation's phase must not pass for the next one's, which zeroes the
            # file only once it has started (seconds on a loaded machine).
            soak_check.clear_phase(home, agent)
        finally:
            hold.unlink()
        if not caught:
            window["skipped"] = "the agent was never caught with an approval pending"
            proc.start()
            return
        approval_id = (home / "agents" / str(agent) / "pending").read_text().strip()
        window["approval_id"] = approval_id
        window["decided_rc"] = procs.approve(home, approval_id, self.args)
        window["decided_at"] = round(self.now(), 2)
        (home / "agents" / str(agent) / "decided").write_text(approval_id)
        proc.start()

    def _writers(self, target: str) -> list[int]:
        if target == "trail":
            return [self.agents[0].pid]
        assert self.sidecar is not None
        return [pid for pid in procs.children(self.sidecar.pid)
                if "resource_tracker" not in procs.cmdline(pid)]  # fmt: skip

    # -- the run ----------------------------------------------------------------------------------

    def start(self) -> None:
        home, args = self.home, self.args
        for sub in ("logs", "sidecar", *(f"agents/{i}/trail" for i in range(args.agents))):
            (home / sub).mkdir(parents=True, exist_ok=True)
        self.disks = {"trail": procs.Disk(home / "agents/0/trail", 1024),
                      "sidecar": procs.Disk(home / "sidecar", 1024)}  # fmt: skip
        if args.store == "redis":
            self.redis = procs.redis(home, args.redis_port, volatile=args.redis_volatile)
            self.redis.start()
            procs.wait_port(args.redis_port)
        self.sidecar = procs.sidecar(home, args.sidecar_port, MASKING_KEY)
        self.sidecar.start()
        self.loader = procs.loader(home, [home / "sidecar"], follow=True)
        self.loader.start()
        options = {
            "seed": str(args.seed),
            "rate": str(args.rate), "otlp": f"http://127.0.0.1:{args.sidecar_port}/v1/traces",
            "store": args.store, "redis-url": f"redis://127.0.0.1:{args.redis_port}/0",
            "redis-volatile": "yes" if args.redis_volatile else "no",
        }  # fmt: skip
        self.agents = [procs.agent(home, i, options) for i in range(args.agents)]
        for proc in self.agents:
            proc.start()
        procs.wait_port(args.sidecar_port, timeout=120.0)
        deadline = time.monotonic() + 120.0
        while not all((home / f"agents/{i}/ready").exists() for i in range(args.agents)):
            if time.monotonic() > deadline or not all(a.alive() for a in self.agents):
                raise RuntimeError(f"an agent did not start: see {home / 'logs'}")
            time.sleep(0.05)
        self.t0 = time.time()
        (home / "go").write_text(json.dumps({"t0": self.t0, "until": self.t0 + args.seconds}))

    def drive(self, faults: list[Fault]) -> None:
        queue: list[tuple[float, int, Fault | Callable[[], None]]] = [
            (fault.at, n, fault) for n, fault in enumerate(faults)
        ]
        while self.now() < self.args.seconds:
            queue.sort(key=lambda item: (item[0], item[1]))
            while queue and queue[0][0] <= self.now():
                at, n, action = queue.pop(0)
                if isinstance(action, Fault):
                    close = self.inject(action)
                    if close is not None:
                        queue.append((at + action.duration, n, close))
                else:
                    action()
            self.sample()
            self.poll_lags()
            self._restart_the_dead()
            time.sleep(0.2)
        for _, _, action in sorted(queue, key=lambda item: (item[0], item[1])):
            if not isinstance(action, Fault):
                action()  # a window still open at the end closes now

    def _restart_the_dead(self) -> None:
        for proc in (*self.agents, self.sidecar, self.loader, self.redis):
            if proc is None or proc.alive() or self.now() >= self.args.seconds - 1:
                continue
            if proc.role == "sidecar" and any(
                w["kind"] == "collector_down" and "end" not in w for w in self.windows
            ):
                continue  # stopped on purpose
            self.unexpected_exits.append(f"{proc.role} pid {proc.pid} at {self.now():.1f}s")
            proc.start()

    def finish(self) -> dict[str, int | None]:
        """Let the agents finish and flush, the loader catch up, then stop the rest."""
        statuses: dict[str, int | None] = {}
        for proc in self.agents:
            statuses[proc.role] = proc.wait(90.0)
            self.sample()
        self.mark_lag("end of run")
        self.poll_lags(block=True)
        for proc in (self.loader, self.sidecar, self.redis):
            if proc is not None:
                statuses[proc.role] = proc.stop()
        # The agents' own trails, loaded once at the end into a database of their own: every span
        # a trail wrote must be there.
        trails = procs.loader(
            self.home, sorted((self.home / "agents").glob("*/trail")), follow=False
        )
        trails.start()
        statuses["trail load"] = trails.wait(300.0)
        return statuses

    def teardown(self) -> None:
        for proc in (*self.agents, self.loader, self.sidecar, self.redis):
            if proc is not None and proc.alive():
                proc.kill()
        for name, disk in self.disks.items():
            disk.unmount(self.home / f"saved-{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--rate", type=float, default=10.0, help="calls per second per agent")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    parser.add_argument(
        "--redis-volatile",
        action="store_true",
        help="run redis-server without persistence (a restart then forgets every key)",
    )
    parser.add_argument("--home", type=Path, help="run directory (default: a new temporary one)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--lag-bound", type=float, default=LAG_BOUND_S, help="seconds")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    if args.store == "redis" and shutil.which("redis-server") is None:
        parser.error("--store redis needs redis-server on PATH")
    args.sidecar_port, args.redis_port = procs.free_port(), procs.free_port()
    home = args.home or Path(tempfile.mkdtemp(prefix="callgate-soak-"))
    home.mkdir(parents=True, exist_ok=True)
    faults = schedule(args.seed, args.seconds, args.agents, args.store)
    (home / "schedule.json").write_text(json.dumps([f.__dict__ for f in faults]))
    print(f"soak: {args.seconds:.0f} s, {args.agents} agents x {args.rate:g} calls/s, "
          f"store {args.store}, seed {args.seed}, home {home}")  # fmt: skip
    print("fault schedule:")
    for fault in faults:
        print("  " + fault.describe())
    sys.stdout.flush()
    run = Run(home=home, args=args)
    marks = [("start", time.monotonic())]
    try:
        run.start()
        marks.append(("run", time.monotonic()))
        run.drive(faults)
        marks.append(("finish", time.monotonic()))
        statuses = run.finish()
        marks.append(("check", time.monotonic()))
        results = soak_check.check(home, run, statuses, rss_bound_mib=RSS_BOUND_MIB,
                                   lag_bound_s=args.lag_bound)  # fmt: skip
    finally:
        run.teardown()
    marks.append(("end", time.monotonic()))
    results["wall_s"] = {a: round(tb - ta, 1) for (a, ta), (_, tb) in itertools.pairwise(marks)}
    print(soak_check.render(results))
    print("wall seconds: " + ", ".join(f"{k} {v}" for k, v in results["wall_s"].items()))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    if not args.keep and args.home is None and all(r["ok"] for r in results["invariants"]):
        shutil.rmtree(home, ignore_errors=True)
    return 0 if all(r["ok"] for r in results["invariants"]) else 1


if __name__ == "__main__":
    sys.exit(main())
