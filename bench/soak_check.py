"""The invariants of a soak run, checked from outside: the backend's ledger, the span files, DuckDB.

Nothing here trusts a counter the checked code keeps about itself when an outside record exists:
effects come from the backend's ledger, spans from the files on disk and the database's rows,
acknowledgements from what each agent's exporter was answered (fsynced per batch).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from soak_domain import MASKING_KEY

_WRITER = re.compile(r"-(\d+)-(\d{4})\.jsonl$")
"""``<prefix>-<start>-<pid>-<seq>.jsonl``: the writer's pid, and its file's place in its chain."""

Ids = set[tuple[str, str]]


def span_files(home: Path) -> dict[str, list[Path]]:
    """Span files by source: the sidecar's, then each agent's trail."""
    found = {"sidecar": sorted((home / "sidecar").glob("*.jsonl"))}
    for trail in sorted((home / "agents").glob("*/trail")):
        found[f"trail-{trail.parent.name}"] = sorted(trail.glob("*.jsonl"))
    return found


def _whole_size(path: Path) -> int:
    """Bytes up to and including the last newline."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        end = size
        while end > 0:
            start = max(0, end - 65536)
            handle.seek(start)
            cut = handle.read(end - start).rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            end = start
    return 0


def whole_line_sizes(home: Path) -> dict[str, int]:
    """The sidecar's files (what the follower loads), each up to its last whole line."""
    return {p.name: _whole_size(p) for p in span_files(home)["sidecar"]}


def _query(
    home: Path, sql: str, timeout: float = 2.0, db_name: str = "soak.duckdb"
) -> list[tuple[Any, ...]] | None:
    from analytics import open_database

    db = home / db_name
    if not db.exists():
        return None
    try:
        with open_database(db, timeout=timeout) as con:
            return con.execute(sql).fetchall()
    except Exception:  # busy, or the loader has not made its tables yet
        return None


def bytes_behind(home: Path, sizes: dict[str, int]) -> int | None:
    """Bytes of ``sizes`` the loader has not consumed yet; None when the database is busy."""
    rows = _query(home, 'SELECT path, "offset" FROM load_state')
    if rows is None:
        return None
    done = {Path(path).name: int(offset) for path, offset in rows}
    return sum(max(0, size - done.get(name, 0)) for name, size in sizes.items())


def wait_mid_call(home: Path, agent: int, timeout: float, phases: tuple[int, ...]) -> int:
    """Wait until the agent is inside its handler in one of ``phases``; the phase last seen."""
    path = home / "agents" / str(agent) / "phase"
    deadline = time.monotonic() + timeout
    phase = -1
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 16, access=mmap.ACCESS_READ) as view:
        while time.monotonic() < deadline:
            phase = view[0]
            if phase in phases:
                return phase
            time.sleep(0.0005)
    return phase


def phase_of(home: Path, agent: int) -> int:
    """The phase the agent last wrote (after a kill: where it died)."""
    return (home / "agents" / str(agent) / "phase").read_bytes()[0]


def clear_phase(home: Path, agent: int) -> None:
    """After a kill: idle, so a wait for a phase never takes the dead incarnation's last one
    for the next incarnation's (zeroed in place: the file is mapped)."""
    fd = os.open(home / "agents" / str(agent) / "phase", os.O_WRONLY)
    try:
        os.pwrite(fd, bytes(1), 0)
    finally:
        os.close(fd)


# -- reading the records --------------------------------------------------------------------------


def read_spans(files: list[Path]) -> tuple[list[tuple[str, str]], dict[int, Ids], int]:
    """Every span id in the files (repeats kept), the ids per writer pid, and torn lines."""
    ids: list[tuple[str, str]] = []
    per_pid: dict[int, Ids] = defaultdict(set)
    torn = 0
    for path in files:
        match = _WRITER.search(path.name)
        pid = int(match.group(1)) if match else 0
        for line in path.read_bytes().split(b"\n"):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except ValueError:
                torn += 1
                continue
            for resource in request.get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        ids.append((span["traceId"], span["spanId"]))
                        per_pid[pid].add(ids[-1])
    return ids, per_pid, torn


def read_reports(home: Path) -> list[dict[str, Any]]:
    reports = []
    for path in sorted((home / "agents").glob("*/outcomes.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                reports.append(json.loads(line))
            except ValueError:
                continue  # a line torn by a kill: that call was not reported
    return reports


def ledger_rows(home: Path) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(home / "ledger.db")
    try:
        return [(k, t, p) for k, t, p in db.execute("SELECT key, tool, pid FROM applied")]
    finally:
        db.close()


# -- the invariants -------------------------------------------------------------------------------


def _row(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"invariant": name, "ok": ok, "detail": detail}


def effects(home: Path, killed: set[int]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = ledger_rows(home)
    per_key = Counter(key for key, _, _ in rows)
    twice = {key: n for key, n in per_key.items() if n > 1}
    reports = read_reports(home)
    # An approved action runs under its approval's key; a repeat of the proposal is answered under
    # the proposal's key. The agent's report of the decision joins the two.
    alias = {
        r["first_key"]: r["key"]
        for r in reports
        if r.get("key") and r.get("first_key") and r["first_key"] != r["key"]
    }
    for report in reports:
        if report.get("key"):
            report["key"] = alias.get(report["key"], report["key"])
    said: dict[str, set[str]] = defaultdict(set)
    in_progress = 0
    for report in reports:
        if report["code"] == "IN_PROGRESS":  # says nothing final: a twin holds the key
            in_progress += 1
        elif report.get("key"):
            said[report["key"]].add(report["outcome"])
    applied_keys = set(per_key)
    denied = sorted(k for k in applied_keys if "not_applied" in said.get(k, set()))
    unreported = {k for k in applied_keys if k not in said}
    by_pid = {key: pid for key, _, pid in rows}
    unexplained = sorted(k for k in unreported if by_pid[k] not in killed)
    phantom = sorted(
        r["key"] for r in reports
        if r.get("ok") and r["outcome"] == "applied" and r["t"] != "balance"
        and r.get("key") and r["key"] not in applied_keys
    )  # fmt: skip
    unknown = sorted({r["key"] for r in reports if r["outcome"] == "unknown" and r.get("key")})
    last: dict[str, str] = {}
    for report in reports:  # each agent's reports are in call order
        if report.get("key") and report["code"] != "IN_PROGRESS":
            last[report["key"]] = report["outcome"]
    unsettled = [k for k in unknown if last.get(k) == "unknown"]
    wrong = sorted(
        k for k in unknown
        if (last.get(k) == "applied") != (k in applied_keys) and last.get(k) != "unknown"
    )  # fmt: skip
    codes = Counter(r["code"] for r in reports)
    stats = {
        "calls_reported": len(reports),
        "applied_writes": len(rows),
        "codes": dict(codes.most_common()),
        "unknown_keys": len(unknown),
        "unknown_applied": sum(1 for k in unknown if k in applied_keys),
        "unknown_settled": len(unknown) - len(unsettled),
        "unreported_applied_by_killed": len(unreported) - len(unexplained),
        "in_progress_answers": in_progress,
    }
    table = [
        _row("write applied at most once per key", not twice,
             f"{len(rows)} applied, {len(per_key)} keys, {len(twice)} keys twice {sorted(twice)[:3]}"),
        _row("applied write never reported not_applied", not denied,
             f"{len(denied)} {denied[:3]}"),
        _row("applied write unreported only if its agent was killed", not unexplained,
             f"{len(unreported) - len(unexplained)} by killed agents, {len(unexplained)} else"),
        _row("write reported applied is in the ledger", not phantom, f"{len(phantom)} {phantom[:3]}"),
        _row("unknown outcome settled as the ledger says", not wrong,
             f"{len(unknown)} unknown, {len(unknown) - len(unsettled)} settled, "
             f"{len(wrong)} settled wrong {wrong[:3]}"),
    ]  # fmt: skip
    return table, stats


def spans(home: Path, run: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    files = span_files(home)
    side_ids, _, side_torn = read_spans(files["sidecar"])
    trail_ids: list[tuple[str, str]] = []
    trail_pids: dict[int, Ids] = {}
    trail_torn = 0
    for source, paths in files.items():
        if source.startswith("trail-"):
            ids, pids, torn = read_spans(paths)
            trail_ids += ids
            trail_pids.update(pids)
            trail_torn += torn
    acked: Ids = set()
    acked_by_pid: dict[int, Ids] = defaultdict(set)
    for path in (home / "agents").glob("*/acked.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a torn last line of a killed agent is no acknowledgement
                acked.add((parts[0], parts[1]))
                acked_by_pid[int(parts[2])].add((parts[0], parts[1]))
    rows = _query(home, "SELECT trace_id, span_id FROM span_rows", timeout=30.0) or []
    db_ids = Counter((t, s) for t, s in rows)
    rows = _query(home, "SELECT trace_id, span_id FROM span_rows", 30.0, "trail.duckdb") or []
    trail_db = Counter((t, s) for t, s in rows)
    db_twice = sum(1 for n in db_ids.values() if n > 1) + sum(1 for n in trail_db.values() if n > 1)
    errors = (_query(home, "SELECT count(*) FROM load_errors", timeout=30.0) or [(0,)])[0][0]
    errors += (_query(home, "SELECT count(*) FROM load_errors", 30.0, "trail.duckdb") or [(0,)])[0][
        0
    ]
    side, db = set(side_ids), set(db_ids)
    missing_side = acked - side
    missing_db = acked - db
    trail_missing = set(trail_ids) - set(trail_db)
    all_missing = (side - db) | trail_missing
    counts = _incarnation_counts(home, trail_pids)
    # One call, one set of ids: what the sidecar acknowledged from a process that exited cleanly
    # is in that process's trail under the same ids, unless its trail counted the span lost.
    not_in_trail = [
        len(acked_by_pid[c["pid"]] - trail_pids.get(c["pid"], set())) - c["trail_lost_spans"]
        for c in counts
    ]
    matched = sum(len(acked_by_pid[c["pid"]] & trail_pids.get(c["pid"], set())) for c in counts)
    stats = {
        "spans_acked": len(acked),
        "sidecar_spans_on_disk": len(side_ids),
        "sidecar_repeats_on_disk": len(side_ids) - len(side),
        "acked_with_trail_ids": matched,
        "trail_spans_on_disk": len(trail_ids),
        "db_spans": len(db_ids),
        "trail_db_spans": len(trail_db),
        "load_errors": errors,
        "torn_lines": {"sidecar": side_torn, "trail": trail_torn},
        "incarnations": counts,
    }
    bad_counts = [c for c in counts if c["clean"] and not c["adds_up"]]
    table = [
        _row("acknowledged span on the sidecar's disk", not missing_side,
             f"{len(acked)} acked, {len(missing_side)} missing"),
        _row("acknowledged span in DuckDB", not missing_db, f"{len(missing_db)} missing"),
        _row("acknowledged span has its trail copy's ids", all(n <= 0 for n in not_in_trail),
             f"{matched} matched, {sum(n > 0 for n in not_in_trail)} processes off"),
        _row("span in DuckDB exactly once", db_twice == 0, f"{db_twice} stored twice"),
        _row("trail span on disk is in DuckDB", not trail_missing,
             f"{len(set(trail_ids))} in trail files, {len(trail_missing)} missing"),
        _row("every span on disk loaded or in load_errors", len(all_missing) <= errors,
             f"{len(all_missing)} missing, {errors} load_errors"),
        _row("counts add up per agent (trail + lost = acked + dropped; written = on disk)",
             not bad_counts,
             f"{sum(c['clean'] for c in counts)} clean exits checked, {len(bad_counts)} off"),
    ]  # fmt: skip
    return table, stats


def _incarnation_counts(home: Path, trail_pids: dict[int, Ids]) -> list[dict[str, Any]]:
    """Per agent process that exited cleanly: spans made = written + lost on the trail =
    acknowledged + dropped on the way to the sidecar, and the trail's count is what is on disk."""
    counts = []
    for path in sorted((home / "agents").glob("*/stats-*.json")):
        stat = json.loads(path.read_text())
        made = stat["trail_spans"] + stat["trail_lost_spans"]
        sent = stat["acked_spans"] + stat["dropped_spans"]
        on_disk = len(trail_pids.get(stat["pid"], set()))
        stat.update(clean=True, on_disk=on_disk,
                    adds_up=made == sent and on_disk == stat["trail_spans"])  # fmt: skip
        counts.append(stat)
    return counts


def approvals_during_kills(home: Path, run: Any) -> list[dict[str, Any]]:
    """An approval decided while the process that proposed it was dead (``approval_kill``) is
    run once, by another process: one ledger row under its approval's key, from a pid the kill
    did not end, and the restarted agent's answer says applied or unknown."""
    from guard.stages.idempotency import approval_key

    windows = [w for w in run.windows if w["kind"] == "approval_kill"]
    rows = ledger_rows(home)
    resumed: dict[str, dict[str, Any]] = {}
    for report in read_reports(home):
        if report.get("resumed"):
            resumed.setdefault(report["approval_id"], report)
    once, by_other, said = 0, 0, 0
    for window in windows:
        key = approval_key(window.get("approval_id", ""))
        pids = [pid for k, _, pid in rows if k == key]
        once += len(pids) == 1 and window.get("decided_rc") == 0
        by_other += bool(pids) and not set(pids) & set(window["pids"])
        # applied, or unknown (its timeout ran out with the write applied), never not_applied
        answer = resumed.get(window.get("approval_id", ""), {}).get("outcome")
        said += answer in ("applied", "unknown")
    n = len(windows)
    return [
        _row("approval decided during a kill runs once, by another process",
             n > 0 and once == by_other == said == n,
             f"{n} decided while the proposer was dead: {once} ran once, {by_other} by another "
             f"process, {said} answered applied or unknown"),
    ]  # fmt: skip


def verify(home: Path, run: Any) -> list[dict[str, Any]]:
    """``callgate verify`` on every writer's chain: whole where no fault hit, the break named where
    one did (a killed writer, a full disk under it)."""
    hit: set[int] = set()
    for window in run.windows:
        if window["kind"] in ("agent_kill", "approval_kill", "sidecar_worker_kill", "disk_full"):
            hit.update(window["pids"])
    groups: dict[int, list[Path]] = defaultdict(list)
    for paths in span_files(home).values():
        for path in paths:
            match = _WRITER.search(path.name)
            groups[int(match.group(1)) if match else 0].append(path)
    clean = [p for pid, paths in groups.items() if pid not in hit for p in paths]
    env = dict(os.environ, CALLGATE_MASKING_KEY=MASKING_KEY)
    command = [sys.executable, "-m", "callgate", "verify"]
    whole = subprocess.run([*command, *map(str, clean)], capture_output=True, text=True, env=env)
    if not clean:
        whole = subprocess.CompletedProcess(command, 1, "no span files", "")
    named, intact, unnamed = 0, 0, []
    hit_groups = sorted(hit & set(groups))
    every_hit = [str(p) for pid in hit_groups for p in groups[pid]]
    together = subprocess.run([*command, *every_hit], capture_output=True, text=True, env=env)
    for pid in hit_groups:  # one by one only when some chain is broken, to name each break
        done = together if together.returncode == 0 else subprocess.run(
            [*command, *map(str, groups[pid])], capture_output=True, text=True, env=env
        )  # fmt: skip
        if done.returncode == 0:
            intact += 1
        elif ".jsonl" in done.stdout + done.stderr:
            named += 1
        else:
            unnamed.append(pid)
    return [
        _row("verify passes on every chain no fault hit", whole.returncode == 0,
             f"{len(groups) - len(hit & set(groups))} chains, {len(clean)} files, rc "
             f"{whole.returncode} {(whole.stdout + whole.stderr).strip()[-200:]}"),
        _row("verify names the break on chains a fault hit", not unnamed,
             f"{len(hit & set(groups))} hit: {named} break named, {intact} intact, "
             f"{len(unnamed)} unnamed"),
    ]  # fmt: skip


def check(
    home: Path,
    run: Any,
    statuses: dict[str, int | None],
    *,
    rss_bound_mib: dict[str, int],
    lag_bound_s: float,
) -> dict[str, Any]:
    killed = {
        pid for w in run.windows if w["kind"] in ("agent_kill", "approval_kill")
        for pid in w["pids"]
    }  # fmt: skip
    effect_rows, effect_stats = effects(home, killed)
    span_rows, span_stats = spans(home, run)
    peak = {role: round(kib / 1024, 1) for role, kib in sorted(run.peak_kib.items())}
    over = {r: m for r, m in peak.items() if m > rss_bound_mib.get(r, 0)}
    slow = [lag for lag in run.lags if lag["lag_s"] is None or lag["lag_s"] > lag_bound_s]
    agents_ok = all(v == 0 for k, v in statuses.items() if k.startswith("agent"))
    agents_ok = agents_ok and statuses.get("sidecar", 0) == 0  # a sidecar that died is no stop
    table = [
        *effect_rows,
        *span_rows,
        *approvals_during_kills(home, run),
        *verify(home, run),
        _row(f"peak RSS within bounds {rss_bound_mib} MiB", not over, f"{peak}"),
        _row(f"loader lag back under {lag_bound_s:.0f} s after each fault", not slow,
             f"{len(run.lags)} measured, max "
             f"{max((lag['lag_s'] or 1e9 for lag in run.lags), default=0):.2f} s"),
        _row("no process died unless killed; agents exit 0", agents_ok and not run.unexpected_exits,
             f"exits {statuses}, unexpected {run.unexpected_exits}"),
    ]  # fmt: skip
    by_kind = Counter(w["kind"] for w in run.windows)
    return {
        "invariants": table,
        "faults": dict(by_kind),
        "windows": run.windows,
        "lags": run.lags,
        "peak_rss_mib": peak,
        "effects": effect_stats,
        "spans": span_stats,
    }


def render(results: dict[str, Any]) -> str:
    lines = ["", "faults injected: " + ", ".join(f"{k} {v}" for k, v in results["faults"].items())]
    effects, spans = results["effects"], results["spans"]
    lines.append(f"calls reported {effects['calls_reported']}, applied writes "
                 f"{effects['applied_writes']}, unknown outcomes {effects['unknown_keys']} "
                 f"({effects['unknown_applied']} of them applied, "
                 f"{effects['unknown_settled']} settled)")  # fmt: skip
    lines.append("codes: " + ", ".join(f"{k} {v}" for k, v in effects["codes"].items()))
    lines.append(f"spans: acked {spans['spans_acked']}, sidecar disk {spans['sidecar_spans_on_disk']}"
                 f" (repeats {spans['sidecar_repeats_on_disk']}), trail disk "
                 f"{spans['trail_spans_on_disk']}, DuckDB {spans['db_spans']} (trail db {spans['trail_db_spans']}), load_errors "
                 f"{spans['load_errors']}, torn lines {spans['torn_lines']}")  # fmt: skip
    lines.append(
        "peak RSS MiB: " + ", ".join(f"{k} {v}" for k, v in results["peak_rss_mib"].items())
    )
    lines.append(
        "loader lag: " + ", ".join(f"{g['after']} {g['lag_s']} s" for g in results["lags"])
    )
    width = max(len(r["invariant"]) for r in results["invariants"])
    lines.append("")
    lines.append(f"{'invariant':<{width}}  ok    detail")
    for row in results["invariants"]:
        mark = "PASS" if row["ok"] else "FAIL"
        lines.append(f"{row['invariant']:<{width}}  {mark}  {row['detail']}")
    return "\n".join(lines)
