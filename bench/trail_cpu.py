"""Process CPU per audited call: callgate's guard and trail against the peers and an older commit.

Each measurement is one fresh process that makes ``-n`` audited calls after a warm-up and reports
the CPU it spent (``time.process_time``: every thread, so the trail's worker counts) from the first
measured call until the audit record is on disk, divided by the calls; and the calling thread's
CPU alone (``time.thread_time``). Blocks of every implementation alternate, ``--rounds`` times, so
they share the machine's load; each round's ratios are taken within the round and the table shows
the medians.

The audited call: a valid ``get_order`` read whose arguments arrive as JSON text, checked against
the caller's role and the tool's argument schema, run, and recorded in a file:

- callgate: the shop's guard (nine stages) with ``telemetry.configure(trail_dir=...)`` (one call
  span and one span per stage, masked, HMAC-chained OTLP JSON lines); and the same guard with the
  null observer, so the trail's own share shows;
- the trail with the ids the observer draws on the calling thread and shares (``share_ids``, as
  ``configure`` makes it when a trail and an OTLP copy must name a call alike), OTLP copy left out;
- the first two at each ``--base`` commit (default 944f983), from a git worktree under /tmp (made
  when missing) imported in its own process;
- tollgate 1.4.0: ``ControlTower`` with a YAML policy, a tool manifest with a params schema,
  ``AutoApprover`` and ``JsonlAuditSink``, awaited on one event loop;
- chokepoint 0.3.0: ``ChokepointInterceptor`` with a role and a schema policy and an
  ``ActionLedger`` mirrored to a JSONL sink.

The peers run under ``--peers-python`` (a venv holding them; never the project's); when it is
missing or cannot import one, that row is skipped with a printed line.
Run: ``.venv/bin/python bench/trail_cpu.py [-n CALLS] [--rounds R] [--peers-python PATH]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARGUMENTS = '{"order_id": "ORD-7777"}'
DEFAULT_PEERS = "/tmp/trailcpu-peers/bin/python"
DEFAULT_BASE = "944f983"


# --- one measurement (the child process) ---------------------------------------------------------


def _measure(run: Callable[[int], Any], flush: Callable[[], Any], n: int) -> dict[str, float]:
    """CPU µs per call (process; calling thread) over ``n`` calls, the flush included."""
    for i in range(min(n, 2000)):
        run(i)
    flush()
    gc.collect()
    gc.disable()
    try:
        process, thread = time.process_time(), time.thread_time()
        for i in range(n):
            run(i)
        thread = time.thread_time() - thread
        flush()
        process = time.process_time() - process
    finally:
        gc.enable()
    return {"process_us": process / n * 1e6, "thread_us": thread / n * 1e6}


def shop_policy(role: str) -> Any:
    """The shop's two order tools for ``role``, with no ceiling a run of calls could reach."""
    from guard import Policy, RolePolicy

    return Policy(
        roles={role: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
        max_invalid_in_a_row=10**9,
    )


def _callgate(
    trail: bool, directory: Path, shared: bool = False
) -> tuple[Callable[[int], Any], Callable[[], Any]]:
    from guard import Principal
    from guard.shop import Order, build_shop
    from telemetry import configure

    role = "bench"
    policy = shop_policy(role)
    handle = (
        configure(trail_dir=directory / "trail", masking_key=b"bench-key", metrics=False)
        if trail
        else None
    )
    observer = handle.observer if handle is not None else None
    if shared and observer is not None:  # as configure makes it for a trail and an OTLP copy
        from telemetry.observer import OTelObserver

        observer = OTelObserver(observer.sinks, share_ids=True)
    order = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=4200, currency="EUR")
    shop = build_shop(orders=[order], policy=policy, observer=observer)
    principal = Principal(id="CUS-1", role=role, scopes=frozenset({"orders:read"}))
    session = shop.guard.session("bench", principal)

    def run(i: int) -> Any:
        result = session.execute("get_order", ARGUMENTS, call_id=f"c{i}")
        assert result.ok, result
        return result

    def flush() -> None:
        if handle is not None:
            handle.force_flush(120)

    return run, flush


def _tollgate(directory: Path) -> tuple[Callable[[int], Any], Callable[[], Any]]:
    import asyncio

    from tollgate import (
        AgentContext,
        AutoApprover,
        ControlTower,
        Intent,
        JsonlAuditSink,
        ToolRegistry,
        ToolRequest,
        YamlPolicyEvaluator,
    )

    (directory / "policy.yaml").write_text(
        "version: '1'\nrules:\n  - tool: get_order\n    agent: {role: bench}\n"
        "    decision: ALLOW\n    reason: support reads orders\n"
    )
    (directory / "manifest.yaml").write_text(
        "version: '1.0.0'\ntools:\n  get_order:\n    effect: read\n    resource_type: order\n"
        "    params_schema:\n      type: object\n      required: [order_id]\n      properties:\n"
        "        order_id: {type: string, pattern: '^ORD-[0-9]+$', maxLength: 32}\n"
    )
    registry = ToolRegistry(directory / "manifest.yaml")
    audit = JsonlAuditSink(directory / "audit.jsonl")
    tower = ControlTower(
        YamlPolicyEvaluator(directory / "policy.yaml"), AutoApprover(), audit, registry=registry
    )
    agent = AgentContext(agent_id="bench", version="1", owner="CUS-1", metadata={"role": "bench"})
    object.__setattr__(agent, "role", "bench")  # the policy matches agent attributes by name
    intent = Intent(action="get_order", reason="the user asked about an order")
    order = {"order_id": "ORD-7777", "customer_id": "CUS-1", "amount_cents": 4200}
    effect, resource, version = registry.resolve_tool("get_order")
    loop = asyncio.new_event_loop()

    async def handler() -> Any:
        return order

    async def call() -> Any:
        request = ToolRequest(
            tool="get_order", action="get", resource_type=resource, effect=effect,
            params=json.loads(ARGUMENTS), manifest_version=version,
        )  # fmt: skip
        return await tower.execute_async(agent, intent, request, handler)

    def run(_: int) -> Any:
        return loop.run_until_complete(call())

    def flush() -> None:
        audit._get_file().flush()  # line-buffered already: every event is written at once

    return run, flush


def _chokepoint(directory: Path) -> tuple[Callable[[int], Any], Callable[[], Any]]:
    from chokepoint import BLOCK, ActionLedger, ChokepointInterceptor, PolicySet

    roles = {"bench": frozenset({"get_order"})}
    allowed = PolicySet("roles").require(
        lambda ctx: ctx.tool_name in roles["bench"], on_fail=BLOCK, reason="role may not call it"
    )
    schema = PolicySet("get_order schema", active_when=lambda ctx: ctx.tool_name == "get_order")
    schema.require(
        lambda ctx: (
            isinstance(ctx.args.get("order_id"), str)
            and ctx.args["order_id"].startswith("ORD-")
            and len(ctx.args["order_id"]) <= 32
        ),
        on_fail=BLOCK,
        reason="order_id must be an order number",
    )
    ledger = ActionLedger(sink_path=directory / "ledger.jsonl")
    interceptor = ChokepointInterceptor(policies=[allowed, schema], ledger=ledger)
    order = {"order_id": "ORD-7777", "customer_id": "CUS-1", "amount_cents": 4200}

    def get_order(order_id: str) -> dict[str, Any]:
        return order

    def run(_: int) -> Any:
        return interceptor.call(
            "get_order", get_order, args=json.loads(ARGUMENTS), session_id="bench"
        )

    return run, lambda: None  # the ledger writes each event before the call returns


def child(impl: str, n: int) -> None:
    """Measure one implementation in this process and print its figures as JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        if impl == "tollgate":
            run, flush = _tollgate(directory)
        elif impl == "chokepoint":
            run, flush = _chokepoint(directory)
        else:
            run, flush = _callgate(impl != "guard", directory, shared=impl == "shared")
        figures = _measure(run, flush, n)
        written = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
        figures["bytes"] = written / (n + min(n, 2000))  # the warm-up's calls are on disk too
    print(json.dumps(figures))


# --- the run (the parent) ------------------------------------------------------------------------


def _base_tree(commit: str, made: list[Path]) -> Path | None:
    """A git worktree of ``commit`` under /tmp (``made`` when this run makes it), or None when git
    cannot make one."""
    tree = Path(tempfile.gettempdir()) / f"callgate-bench-{commit}"
    if not (tree / "telemetry").is_dir():
        made.append(tree)
        made = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            print(f"skipped {commit}: {made.stderr.strip()}")
            return None
    return tree


def _run_child(python: str, tree: Path, impl: str, n: int) -> dict[str, float] | None:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    done = subprocess.run(
        [python, str(Path(__file__).resolve()), "--child", impl, "-n", str(n)],
        capture_output=True,
        text=True,
        cwd=tree,
        env=env,
        timeout=900,
    )
    if done.returncode != 0:
        print(f"{impl} ({tree}) failed: {done.stderr.strip().splitlines()[-1:]}")
        return None
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _peers(python: str) -> list[str]:
    """The peers importable by ``python``; a printed line for each one that is not."""
    found = []
    for name in ("tollgate", "chokepoint"):
        if not Path(python).exists():
            print(f"skipped {name}: no {python} (a venv with tollgate==1.4.0 chokepoint==0.3.0)")
            continue
        probe = subprocess.run([python, "-c", f"import {name}"], capture_output=True)
        if probe.returncode == 0:
            found.append(name)
        else:
            print(f"skipped {name}: {python} cannot import it")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating blocks of every row")
    parser.add_argument("--peers-python", default=DEFAULT_PEERS, help="a python with the peers")
    parser.add_argument(
        "--base", action="append", help=f"an older commit to compare with (repeat; {DEFAULT_BASE})"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    rows: list[tuple[str, str, Path, str]] = [
        ("callgate guard + trail", sys.executable, ROOT, "trail"),
        ("callgate guard + trail, shared ids", sys.executable, ROOT, "shared"),
        ("callgate guard alone", sys.executable, ROOT, "guard"),
    ]
    args.base = args.base or [DEFAULT_BASE]
    made: list[Path] = []
    try:
        _run(args, rows, made)
    finally:
        for tree in made:  # the worktrees this run made go again
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])


def _run(
    args: argparse.Namespace, rows: list[tuple[str, str, Path, str]], made: list[Path]
) -> None:
    for commit in args.base:
        base = _base_tree(commit, made)
        if base is not None:
            rows += [
                (f"callgate {commit} guard + trail", sys.executable, base, "trail"),
                (f"callgate {commit} guard alone", sys.executable, base, "guard"),
            ]
    rows += [(name, args.peers_python, ROOT, name) for name in _peers(args.peers_python)]
    results: dict[str, list[dict[str, float]]] = {label: [] for label, *_ in rows}
    for round_ in range(args.rounds):
        order = rows[round_ % len(rows) :] + rows[: round_ % len(rows)]  # rotate who goes first
        for label, python, tree, impl in order:
            figures = _run_child(python, tree, impl, args.n)
            if figures is not None:
                results[label].append(figures)
    _report(results, args)


def _report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    ours = results["callgate guard + trail"]
    print(f"audited get_order calls per block: {args.n}; rounds: {args.rounds}; "
          f"cpu count: {os.cpu_count()}; python {sys.version.split()[0]}")  # fmt: skip
    print(f"{'row':36} {'process µs':>10} {'thread µs':>9} {'bytes/call':>10} {'x ours':>7}")
    for label, runs in results.items():
        if not runs:
            continue
        rounds = min(len(runs), len(ours))
        ratios = [runs[i]["process_us"] / ours[i]["process_us"] for i in range(rounds)]
        print(
            f"{label:36} {statistics.median(r['process_us'] for r in runs):10.1f} "
            f"{statistics.median(r['thread_us'] for r in runs):9.1f} "
            f"{statistics.median(r['bytes'] for r in runs):10.0f} "
            f"{statistics.median(ratios) if ratios else float('nan'):6.2f}x"
        )
    pairs = [
        ("callgate", "callgate guard + trail", "callgate guard alone"),
        ("callgate, shared ids", "callgate guard + trail, shared ids", "callgate guard alone"),
    ]
    pairs += [(f"callgate {commit}", f"callgate {commit} guard + trail",
               f"callgate {commit} guard alone") for commit in args.base]  # fmt: skip
    for name, with_trail, alone in pairs:
        trail, guard = results.get(with_trail), results.get(alone)
        if trail and guard:
            added = [t["process_us"] - g["process_us"] for t, g in zip(trail, guard, strict=False)]
            thread = [t["thread_us"] - g["thread_us"] for t, g in zip(trail, guard, strict=False)]
            print(f"{name}: the trail adds {statistics.median(added):.1f} µs process CPU per call "
                  f"({statistics.median(thread):.1f} µs on the calling thread)")  # fmt: skip


if __name__ == "__main__":
    main()
