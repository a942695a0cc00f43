"""What the durable stores cost per guard call: memory, SQLite and a real redis-server, same run.

Two paths of the shop (``guard.shop``): a read (``get_order``) and a write proposed and approved
(``refund_order``, then ``Guard.approve``). Every backend runs the same guard, policy and calls;
the memory store is the baseline (no I/O at all), SQLite the single-host durable one. With
``--processes 2`` each backend also runs in two processes at once (their own sessions, one SQLite
file, one Redis), and the figure is both processes' calls over the wall time.

The redis-server is started by the script on a free 127.0.0.1 port, with the append-only file on
(``appendfsync everysec``) as a deployment would run it, in a temporary directory. Blocks of the
backends alternate, ``--rounds`` times, so load from elsewhere on the machine falls on all of
them; the table shows each backend's median over its blocks and its ratio to memory.

Run: ``python bench/stores.py`` (``--calls 2000 --rounds 3`` by default). Every block runs in a
fresh interpreter; ``--trees OLD NEW`` imports the guard from each source tree in turn (blocks
alternating), so a change is measured against the code before it in the same run, beside the
memory and SQLite baselines.

Two more tables, in one process each, since on a small VM the wake-up between two processes
varies more from one interpreter to the next than a round trip costs:

- **one script or two steps**: Redis blocks of ``--calls`` / 10 calls alternating in one process,
  with the stores' one-script operations (``claim_after``: the counts and the write's claim;
  ``decide_then_claim``: an approval's decision and its claim) and with them hidden, so the
  guard counts, decides and claims in separate round trips as any store does;
- **the floor**: a bare ``PING`` on the stores' own connection, the least one round trip costs
  here, so a path that waits *n* times cannot pass 1 / (*n* x PING) calls per second.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from guard import Policy, Principal, RolePolicy
from guard.shop import Order, build_shop
from guard.stores import Stores, open_sqlite_stores

ROLE = "bench"
PRINCIPAL = Principal(id="CUS-1", role=ROLE, scopes=frozenset({"orders:read", "refunds:write"}))
PATHS = ("read", "propose+approve")


def _stores(backend: str, where: str) -> Stores:
    if backend == "memory":
        return Stores.memory()
    if backend == "sqlite":
        return open_sqlite_stores(where)
    from guard.stores.redis import open_redis_stores

    return open_redis_stores(where, prefix=f"bench{time.monotonic_ns()}:")


def _calls(stores: Stores, path: str, tag: str, worker: int = 0) -> Callable[[int], None]:
    """One call of ``path`` per invocation, on sessions of their own (``tag``); ``worker`` keeps
    the refunds of concurrent processes apart (one customer's identical refunds share a lock)."""
    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**15, currency="BRL")
    policy = Policy(
        roles={ROLE: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
    )
    shop = build_shop(
        orders=[big],
        policy=policy,
        idempotency=stores.idempotency,
        approvals=stores.approvals,
        counters=stores.counters,
    )
    guard = shop.guard
    session = guard.session(f"{tag}-s", PRINCIPAL)
    session.execute("get_order", '{"order_id": "ORD-7777"}')  # a refund needs the order seen

    def read(_: int) -> None:
        assert session.execute("get_order", '{"order_id": "ORD-7777"}', call_id="c").ok

    def write(i: int) -> None:
        text = f'{{"order_id": "ORD-7777", "amount_cents": {worker * 10**8 + i + 1}, "currency": "BRL", "reason": "damaged"}}'
        pending = session.execute("refund_order", text)
        assert pending.approval_id is not None, pending
        assert guard.approve(pending.approval_id, by="bench").ok

    return read if path == "read" else write


def _rate(stores: Stores, path: str, calls: int, tag: str) -> float:
    """Calls per second of ``path`` on ``stores``, after a short warm-up."""
    run = _calls(stores, path, tag)
    for i in range(min(100, calls)):
        run(10**6 + i)
    start = time.perf_counter()
    for i in range(calls):
        run(i)
    return calls / (time.perf_counter() - start)


def _child(
    backend: str, where: str, path: str, calls: int, tag: str, worker: int, barrier: Barrier
) -> None:
    """One of several processes: its own stores and sessions; starts with the others."""
    with _stores(backend, where) as stores:
        run = _calls(stores, path, tag, worker + 1)
        for i in range(min(100, calls)):
            run(10**6 + i)
        barrier.wait(timeout=120)
        for i in range(calls):
            run(i)


def _rate_processes(backend: str, where: str, path: str, calls: int, n: int, tag: str) -> float:
    """Calls per second of ``n`` processes together: all their calls over the wall time."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    procs = [
        ctx.Process(target=_child, args=(backend, where, path, calls, f"{tag}-{i}", i, barrier))
        for i in range(n)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=120)
        start = time.perf_counter()
        for proc in procs:
            proc.join(timeout=600)
        elapsed = time.perf_counter() - start
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
    if any(proc.exitcode != 0 for proc in procs):
        raise RuntimeError(f"a {backend} bench process failed: {[p.exitcode for p in procs]}")
    return n * calls / elapsed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def redis_server(home: Path) -> Iterator[str]:
    """A redis-server on a free loopback port, AOF on, in ``home``; its URL."""
    import redis

    executable = shutil.which("redis-server")
    if executable is None:
        raise SystemExit("redis-server not found on PATH (apt-get install redis-server)")
    port = _free_port()
    argv = [executable, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home)]
    argv += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.02)
        client.close()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _block(
    tree: str | None, backend: str, where: str, path: str, n: int, calls: int, tag: str
) -> float:
    """One block in a fresh interpreter importing the guard from ``tree`` (None: this one's path)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree
    argv = [sys.executable, __file__, "--block", backend, where or "-", path, str(n), str(calls)]
    done = subprocess.run([*argv, tag], env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"block {backend}/{path} on {tree} failed:\n{done.stderr}")
    return float(done.stdout.split()[-1])


def _run_block(argv: list[str]) -> None:
    """``--block BACKEND WHERE PATH PROCESSES CALLS TAG``: print one block's calls per second."""
    backend, where, path, n, calls, tag = argv
    where = "" if where == "-" else where
    if int(n) == 1:
        with _stores(backend, where) as stores:
            print(_rate(stores, path, int(calls), tag))
    else:
        print(_rate_processes(backend, where, path, int(calls), int(n), tag))


WAITS = {"read": 1, "propose+approve": 4}
"""Round trips each path waits for on Redis (``tests/guard/stores/test_redis_wire.py`` counts them)."""


def _one_script_or_two_steps(url: str, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per path, calls per second with the one-script operations and with them hidden: blocks of
    ``calls`` alternating ``rounds`` times in this process, medians."""
    from guard.stores.redis import RedisApprovalStore, RedisIdempotencyStore

    one_step = {
        RedisIdempotencyStore: RedisIdempotencyStore.claim_after,
        RedisApprovalStore: RedisApprovalStore.decide_then_claim,
    }
    rates: dict[str, tuple[float, float]] = {}
    for path in PATHS:
        with _stores("redis", url) as stores:
            run = _calls(stores, path, f"ab-{path}")
            for i in range(min(100, calls)):
                run(10**6 + i)
            seen: dict[bool, list[float]] = {True: [], False: []}
            done = 0
            for round_ in range(rounds):
                for whole in (True, False) if round_ % 2 else (False, True):
                    if not whole:  # the guard looks these up per call: hidden, it takes two steps
                        for cls, method in one_step.items():
                            delattr(cls, method.__name__)
                    try:
                        start = time.perf_counter()
                        for _ in range(calls):
                            run(done)
                            done += 1
                        seen[whole].append(calls / (time.perf_counter() - start))
                    finally:
                        for cls, method in one_step.items():
                            setattr(cls, method.__name__, method)
            rates[path] = (statistics.median(seen[True]), statistics.median(seen[False]))
    return rates


def _ping_floor(url: str, calls: int) -> float:
    """Seconds of one bare PING on the stores' own connection (median of 5 blocks)."""
    from guard.stores._redis_wire import wire_of
    from guard.stores.redis import RedisStores

    with _stores("redis", url) as stores:
        assert isinstance(stores, RedisStores)
        wire = wire_of(stores.client)  # the connection the stores' own commands take
        wire.command("PING")
        blocks = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(calls):
                wire.command("PING")
            blocks.append((time.perf_counter() - start) / calls)
    return statistics.median(blocks)


def _print_same_process(rates: dict[str, tuple[float, float]], ping: float) -> None:
    print()
    print("redis, one process: one script or two steps (blocks alternating)")
    print(
        f"{'path':16} {'waits':>5} {'one script':>10} {'two steps':>10} {'ratio':>6} {'floor':>7}"
    )
    for path, (whole, split) in rates.items():
        floor = 1 / (WAITS[path] * ping)
        print(
            f"{path:16} {WAITS[path]:5} {whole:10.0f} {split:10.0f} {whole / split:5.2f}x "
            f"{floor:7.0f}"
        )
    print(f"floor: 1 / (waits x PING); a bare PING on the stores' connection: {ping * 1e6:.0f} µs")


def main() -> None:
    if sys.argv[1:2] == ["--block"]:
        _run_block(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000, help="calls per block and process")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per backend and path")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--trees",
        nargs="+",
        default=[None],
        help="source trees to import the guard from, blocks alternating (e.g. a checkout of the "
        "previous release, then this one); default: this interpreter's path",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, redis_server(Path(tmp)) as url:
        where = {"memory": "", "sqlite": str(Path(tmp) / "bench.db"), "redis": url}
        rates: dict[tuple[str | None, str, str, int], list[float]] = {}
        for round_ in range(args.rounds):
            for n in args.processes:
                for path in PATHS:
                    # Alternating blocks: load from elsewhere falls on every tree and backend.
                    for tree in args.trees:
                        for backend in where:
                            tag = f"t{args.trees.index(tree)}-r{round_}-{n}-{path}-{backend}"
                            rate = _block(tree, backend, where[backend], path, n, args.calls, tag)
                            rates.setdefault((tree, backend, path, n), []).append(rate)
        same_process = _one_script_or_two_steps(url, max(1, args.calls // 10), 4 * args.rounds)
        ping = _ping_floor(url, args.calls)
    _print(rates, args)
    _print_same_process(same_process, ping)


def _print(rates: dict[tuple[str | None, str, str, int], list[float]], args: Any) -> None:
    print(f"calls per block and process: {args.calls}; blocks per row: {args.rounds}")
    first = args.trees[0]
    print(
        f"{'tree':14} {'backend':8} {'procs':>5} {'path':16} {'calls/s':>9} {'vs memory':>9} "
        f"{'vs tree 1':>9}"
    )
    for n in args.processes:
        for path in PATHS:
            for tree in args.trees:
                memory = statistics.median(rates[(tree, "memory", path, n)])
                for backend in ("memory", "sqlite", "redis"):
                    rate = statistics.median(rates[(tree, backend, path, n)])
                    base = statistics.median(rates[(first, backend, path, n)])
                    label = "this" if tree is None else Path(tree).name
                    print(
                        f"{label:14} {backend:8} {n:5} {path:16} {rate:9.0f} "
                        f"{rate / memory:8.2f}x {rate / base:8.2f}x"
                    )


if __name__ == "__main__":
    main()
