"""What full per-stage tracing costs per call, against the naive loop and the bare guard, in one run.

Measured, on the same mixed workload (half reads that pass all nine stages, a quarter refund
proposals that stop at confirmation, a quarter schema rejections):

- naive: ``json.loads``, a dict lookup and the ``get_order`` handler, no guard;
- guard, null observer; and with an observer that does nothing but is not the null one (what the
  pipeline itself spends on reporting stage events to a live observer);
- guard + local trail: ``telemetry.configure(trail_dir=...)`` (OTLP JSON lines, one span per stage,
  masked, hash-chained; the masking log filter installed);
- guard + OTLP: ``configure(otlp=True)``: the same spans replayed through the SDK's TracerProvider,
  ``BatchSpanProcessor`` and the OTLP/gRPC exporter, to a sidecar in another process;
- guard + inline SDK: the textbook way, for scale: each span made with ``start_span``/``end`` on the
  calling thread at call end, ``BatchSpanProcessor``, OTLP/gRPC to the same sidecar.

Per call: median and p99 on the calling thread (GC off while timing), CPU per call (process CPU,
every thread, from the first call until everything is flushed), and added cost against the bare
guard. The sidecar runs in a separate process so its CPU is not counted.
The process CPU of one audited call against tollgate, chokepoint and older commits, each in its own
process: ``bench/trail_cpu.py``.
Run: ``.venv/bin/python bench/telemetry_overhead.py [-n CALLS]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from guard import BaseObserver, Observer, Policy, Principal, RolePolicy, ToolContext
from guard.call import Call
from guard.result import ToolResult
from guard.shop import Order, build_shop
from telemetry import Masker, build_call_spans, configure

ROLE = "bench"
PRINCIPAL = Principal(id="CUS-1", role=ROLE, scopes=frozenset({"orders:read", "refunds:write"}))
KEY = b"bench-key"


def policy() -> Policy:
    return Policy(
        roles={ROLE: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
        max_invalid_in_a_row=10**9,
    )


def workload(observer: Observer | None) -> Callable[[int], Any]:
    """A fresh shop guard behind ``observer`` and the mixed call sequence."""
    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**15, currency="BRL")
    shop = build_shop(orders=[big], policy=policy(), observer=observer)
    session = shop.guard.session("bench", PRINCIPAL)
    session.execute("get_order", '{"order_id": "ORD-7777"}')

    def run(i: int) -> Any:
        kind = i % 4
        if kind == 0:
            text = f'{{"order_id": "ORD-7777", "amount_cents": {i + 1}, "currency": "BRL", "reason": "damaged"}}'
            return session.execute("refund_order", text, call_id=f"c{i}")
        if kind == 1:
            return session.execute("get_order", '{"order_id": 7777}', call_id=f"c{i}")
        return session.execute("get_order", '{"order_id": "ORD-7777"}', call_id=f"c{i}")

    return run


def naive() -> Callable[[int], Any]:
    big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**15, currency="BRL")
    shop = build_shop(orders=[big], policy=policy())
    tools = {spec.name: spec for spec in shop.guard.registry.values()}
    context = ToolContext(
        principal=PRINCIPAL,
        session_id="naive",
        call_id="c",
        idempotency_key=None,
        attempt=1,
        timeout=10.0,
    )

    def run(_: int) -> Any:
        args = json.loads('{"order_id": "ORD-7777"}')
        return tools["get_order"].handler(SimpleNamespace(**args), context)

    return run


class LiveNoOpObserver(BaseObserver):
    """Listens and does nothing, but is not the null observer: the guard's own cost of reporting."""


class InlineSDKObserver(BaseObserver):
    """The textbook observer: at call end, each span made on the calling thread with the SDK."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._masker = Masker(key=KEY)

    def call_ended(self, call: Call, result: ToolResult) -> None:
        head, *stages = build_call_spans(call, result, self._masker)
        span = self._tracer.start_span(
            head.name, attributes=dict(head.attributes), start_time=head.start_ns
        )
        context = trace.set_span_in_context(span)
        for record in stages:
            child = self._tracer.start_span(
                record.name,
                context=context,
                attributes=dict(record.attributes),
                start_time=record.start_ns,
            )
            child.end(end_time=record.end_ns)
        span.end(end_time=head.end_ns)


def measure(
    run: Callable[[int], Any], n: int, flush: Callable[[], Any]
) -> tuple[float, float, float]:
    """Median and p99 µs on the calling thread, and CPU µs per call until ``flush`` returns."""
    for i in range(min(n, 1000)):
        run(i + 10 * n)
    flush()
    samples = []
    gc.collect()
    gc.disable()
    cpu = time.process_time()
    try:
        for i in range(n):
            start = time.perf_counter_ns()
            run(i)
            samples.append(time.perf_counter_ns() - start)
        flush()
        cpu = time.process_time() - cpu
    finally:
        gc.enable()
    ordered = sorted(samples)
    return (
        statistics.median(ordered) / 1000,
        ordered[int(len(ordered) * 0.99)] / 1000,
        cpu / n * 1e6,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sidecar(directory: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    code = "import sys; from telemetry.cli import sidecar; sidecar(sys.argv[1:])"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            "--dir",
            str(directory),
            "--grpc-port",
            str(port),
            "--http-port",
            "-1",
        ],
        stdout=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process, port
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("sidecar did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=20_000, help="calls per measurement")
    n = parser.parse_args().n
    rows: list[tuple[str, float, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        sidecar, port = start_sidecar(Path(tmp) / "sidecar")
        try:
            rows.append(
                ("naive loop (get_order, no guard)", *measure(naive(), n, lambda: None), "")
            )
            rows.append(("guard, null observer", *measure(workload(None), n, lambda: None), ""))
            live = measure(workload(LiveNoOpObserver()), n, lambda: None)
            rows.append(("guard, live no-op observer", *live, "the pipeline's own event cost"))

            trail = configure(trail_dir=Path(tmp) / "trail", masking_key=KEY, metrics=False)
            row = measure(workload(trail.observer), n, lambda: trail.force_flush(60))
            trail.shutdown()
            spans = trail.trail.spans if trail.trail else 0
            rows.append(("guard + local trail (per-stage spans)", *row, f"{spans} spans written"))

            otlp = configure(
                trail=False,
                otlp=True,
                otlp_protocol="grpc",
                otlp_endpoint=f"http://127.0.0.1:{port}",
                masking_key=KEY,
                metrics=False,
            )
            row = measure(workload(otlp.observer), n, lambda: otlp.force_flush(60))
            otlp.shutdown()
            rows.append(
                ("guard + OTLP (SDK spans off-thread)", *row, f"{otlp.dropped_spans} spans dropped")
            )

            provider = TracerProvider()
            provider.add_span_processor(
                BatchSpanProcessor(OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True))
            )
            inline = InlineSDKObserver(provider.get_tracer("bench"))
            row = measure(workload(inline), n, lambda: provider.force_flush(60_000))
            provider.shutdown()
            rows.append(("guard + inline SDK spans (reference)", *row, ""))
        finally:
            sidecar.terminate()
            sidecar.wait(20)

    base_med, _, base_cpu = rows[1][1], rows[1][2], rows[1][3]
    print(
        f"calls per measurement: {n}; mix: 1/2 reads (9 stages), 1/4 refund proposals (8), 1/4 invalid (4)"
    )
    print(f"cpu count: {os.cpu_count()}; python {sys.version.split()[0]}")
    header = f"{'configuration':40} {'med µs':>8} {'p99 µs':>8} {'cpu µs':>8} {'+med µs':>8} {'+cpu µs':>8} {'x guard':>7}"
    print(header)
    for label, med, p99, cpu, note in rows:
        print(
            f"{label:40} {med:8.1f} {p99:8.1f} {cpu:8.1f} {med - base_med:8.1f} {cpu - base_cpu:8.1f} "
            f"{cpu / base_cpu:6.2f}x  {note}"
        )
    trail_row = rows[3]
    print(
        f"goal (local trail): +{trail_row[1] - base_med:.1f} µs calling thread (<= 40), "
        f"+{trail_row[3] - base_cpu:.1f} µs CPU (<= 60)"
    )


if __name__ == "__main__":
    main()
