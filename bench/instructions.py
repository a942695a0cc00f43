"""CPU instructions per guarded call, here and at an older commit: the figure that holds still.

Wall-clock and CPU-time figures on a shared 2-core VM move 10-30% from one run to the next, so a
regression of a few percent cannot be told from noise with them. Instructions retired can: each
workload runs under valgrind's callgrind twice, for 0 and for ``-n`` calls after the same warm-up
(gc off, ``PYTHONHASHSEED=0``), and the difference divided by ``-n`` is what one call costs,
start-up and imports cancelled out. Runs repeat to within a fraction of a percent.

The workloads, each through the shop's guard with the null observer:

- ``read``: a valid ``get_order`` whose arguments arrive as JSON text (``bench/trail_cpu.py``'s
  "guard alone" call);
- ``refund``: a refund proposed, then approved and run (``bench/guard_overhead.py``'s row).

Each ``--base`` commit (default 944f983) runs from a git worktree under /tmp, as in
``bench/trail_cpu.py``. Needs ``valgrind`` (``apt-get install valgrind``); about a minute a row.
Run: ``.venv/bin/python bench/instructions.py [-n CALLS] [--base COMMIT]``.
"""

from __future__ import annotations

import argparse
import gc
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trail_cpu import DEFAULT_BASE, ROOT, _base_tree, _callgate, shop_policy

WARM_UP = 500
WORKLOADS = ("read", "refund")


def _refund() -> Callable[[int], Any]:
    from guard import Principal
    from guard.shop import Order, build_shop

    role = "bench"
    policy = shop_policy(role)
    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**15, currency="BRL")
    guard = build_shop(orders=[big], policy=policy).guard
    principal = Principal(id="CUS-1", role=role, scopes=frozenset({"orders:read", "refunds:write"}))
    writer = guard.session("bench-write", principal)
    writer.execute("get_order", '{"order_id": "ORD-7777"}')

    def run(i: int) -> Any:
        arguments = (
            f'{{"order_id": "ORD-7777", "amount_cents": {i + 1}, "currency": "BRL", '
            '"reason": "damaged"}'
        )
        pending = writer.execute("refund_order", arguments)
        result = guard.approve(pending.approval_id or "", by="bench")
        assert result.ok, result
        return result

    return run


def child(workload: str, n: int) -> None:
    """Warm up, then make ``n`` calls of ``workload`` with gc off (under callgrind)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = _callgate(False, Path(tmp))[0] if workload == "read" else _refund()
        for i in range(WARM_UP):
            run(i)
        gc.collect()
        gc.disable()
        for i in range(WARM_UP, WARM_UP + n):
            run(i)


def _collected(tree: Path, workload: str, n: int) -> int:
    """Instructions callgrind counted for a whole child process of ``n`` calls."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            workload,
            "-n",
            str(n),
        ],
        capture_output=True,
        text=True,
        cwd=tree,
        # No bytecode written: the first run would compile and cache what later runs only load.
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(tree),
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
        timeout=1800,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{workload} at {tree} failed: {done.stderr.strip()[-400:]}")
    return int(found.group(1))


def per_call(tree: Path, workload: str, n: int) -> float:
    """Instructions one call of ``workload`` costs at ``tree``."""
    return (_collected(tree, workload, n) - _collected(tree, workload, 0)) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1000, help="calls per measurement")
    parser.add_argument(
        "--base", action="append", help=f"an older commit to compare with (repeat; {DEFAULT_BASE})"
    )
    parser.add_argument("--child", choices=WORKLOADS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.n)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    made: list[Path] = []
    try:
        trees = [("this checkout", ROOT)]
        for commit in args.base or [DEFAULT_BASE]:
            if (tree := _base_tree(commit, made)) is not None:
                trees.append((commit, tree))
        print(f"instructions per call, {args.n} calls after {WARM_UP} (callgrind, gc off)")
        print(f"{'workload':10} {'tree':16} {'instructions':>13} {'x ours':>7}")
        for workload in WORKLOADS:
            ours = None
            for label, tree in trees:
                count = per_call(tree, workload, args.n)
                ours = ours or count
                print(f"{workload:10} {label:16} {count:13,.0f} {count / ours:6.3f}x")
    finally:
        for tree in made:  # the worktrees this run made go again
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])


if __name__ == "__main__":
    main()
