"""Sidecar ingest: spans/s accepted and on disk, over OTLP/gRPC, HTTP/protobuf and HTTP/JSON.

Each run starts the sidecar in its own process (``OTLPReceiver`` with gRPC and HTTP on free
loopback ports, a real ``SpanFileWriter``) and ``--clients`` client processes that send
pre-encoded 512-span requests (callgate's own spans, made by the shop guard with the local trail)
as fast as the server answers, for ``--seconds``. A client counts the spans of every request the
server acknowledged; afterwards the span files are read back and their spans counted, so
"on disk" is what a loader would find, not what the server says.

The baseline runs in the same invocation, on the same machine state: the same server with the
receiver's encoders swapped for the path the sidecar used before (``_check`` walk, then
``request_to_json``: ``MessageToDict`` + id rewrite + ``json.dumps``; JSON bodies through
``parse_request``). Each protocol runs baseline, new, baseline, new, and the best of each is
kept; the ratio is new over baseline. The server's peak RSS is reported too (memory bounded), and
the CPU the client processes used, in cores: what the sidecar left of the 2 cores is the rest.

``--baseline-tree PATH`` adds the sidecar of another source tree as a second baseline (for the
issue's "before": ``git archive 944f983 | tar -x -C /tmp/base944`` and
``--baseline-tree /tmp/base944``): that tree's own ``callgate sidecar`` command, in a subprocess,
with its own HTTP handling, encoders and file writer, fed by the same clients; its ratio is new
over it.

``--processes N`` runs the new path's sidecar with N encoding worker processes
(``OTLPReceiver(processes=N)``, as ``callgate sidecar --processes N``); its RSS column is then the
receiving process's plus N times the largest worker's.

Run: ``.venv/bin/python bench/sidecar.py [--seconds 6] [--clients 2] [--spans 512] [--processes 2]``.

``--bomb`` measures memory instead: the peak RSS of ``callgate sidecar`` while clients send 1 MiB
gzip bodies that inflate to 1 GiB; ``--tree`` runs another source tree's sidecar, for the before
figure: ``git archive main | tar -x -C /tmp/main && bench/sidecar.py --bomb --tree /tmp/main``.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import multiprocessing as mp
import os
import re
import resource
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from guard import Policy, Principal, RolePolicy
from guard.shop import Order, build_shop
from telemetry import SpanFileWriter, configure
from telemetry.otlpjson import parse_request, request_to_json
from telemetry.sidecar import Encoded, Ingest, OTLPReceiver

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOCOLS = ("grpc", "http/protobuf", "http/json")


class LegacyIngest(Ingest):
    """The ingest core as it was: a ``_check`` walk, then ``MessageToDict`` for every request."""

    def encode(self, request: ExportTraceServiceRequest) -> Encoded:
        count = 0
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if len(span.trace_id) != 16 or len(span.span_id) != 8:
                        raise ValueError("trace_id must be 16 bytes and span_id 8 bytes")
                    if span.parent_span_id and len(span.parent_span_id) != 8:
                        raise ValueError("parent_span_id must be 8 bytes")
                    count += 1
        return Encoded(request_to_json(request) if count else "", count, 0)

    def encode_protobuf(self, body: bytes) -> Encoded:
        return self.encode(ExportTraceServiceRequest.FromString(body))

    def decode_json(self, body: bytes) -> Encoded:
        return self.encode(parse_request(body))


def make_requests(spans: int, distinct: int = 4) -> list[ExportTraceServiceRequest]:
    """``distinct`` requests of ``spans`` callgate spans each (reads, refund proposals, rejections)."""
    role = "bench"
    policy = Policy(
        roles={role: RolePolicy(tools=frozenset({"get_order", "refund_order"}))},
        rate_limit=None,
        max_steps_per_session=10**9,
        max_steps_per_turn=10**9,
        max_identical_calls=10**9,
        max_invalid_in_a_row=10**9,
    )
    with tempfile.TemporaryDirectory() as directory:
        handle = configure(trail_dir=directory, masking_key=b"bench", metrics=False)
        big = Order(order_id="ORD-7777", customer_id="CUS-1", amount_cents=10**9, currency="BRL")
        shop = build_shop(orders=[big], policy=policy, observer=handle.observer)
        principal = Principal(
            id="CUS-1", role=role, scopes=frozenset({"orders:read", "refunds:write"})
        )
        session = shop.guard.session("bench", principal)
        for i in range(spans * distinct // 6 + 10):
            if i % 4 == 0:
                text = f'{{"order_id": "ORD-7777", "amount_cents": {i + 1}, "currency": "BRL", "reason": "damaged"}}'
                session.execute("refund_order", text, call_id=f"c{i}")
            elif i % 4 == 1:
                session.execute("get_order", '{"order_id": 7777}', call_id=f"c{i}")
            else:
                session.execute("get_order", '{"order_id": "ORD-7777"}', call_id=f"c{i}")
        handle.shutdown()
        lines = [
            line
            for path in sorted(Path(directory).glob("*.jsonl"))
            for line in path.read_text().splitlines()
        ]
    template = parse_request(lines[0])
    all_spans = [
        span
        for line in lines
        for group in parse_request(line).resource_spans
        for scope in group.scope_spans
        for span in scope.spans
    ]
    requests = []
    for index in range(distinct):
        request = ExportTraceServiceRequest()
        group = request.resource_spans.add()
        group.resource.CopyFrom(template.resource_spans[0].resource)
        scope = group.scope_spans.add()
        scope.scope.CopyFrom(template.resource_spans[0].scope_spans[0].scope)
        chunk = all_spans[index * spans : (index + 1) * spans]
        if len(chunk) < spans:
            chunk = (all_spans * (spans // len(all_spans) + 1))[:spans]
        scope.spans.extend(chunk)
        requests.append(request)
    return requests


def serve(
    legacy: bool, directory: str, ports: Any, stop: Any, result: Any, processes: int = 1
) -> None:
    """The sidecar process: serve until ``stop`` is set, then report stats and peak RSS.

    With ``processes`` > 1 the RSS is the receiving process's plus ``processes`` times the largest
    worker's (an upper bound on the total)."""
    processes = 1 if legacy else processes
    factory = functools.partial(SpanFileWriter, directory)
    server = OTLPReceiver(
        factory(),
        grpc_port=0,
        http_port=0,
        processes=processes,
        writer_factory=factory if processes > 1 else None,
    )
    if legacy:
        server.ingest = LegacyIngest(server.ingest.writer, budget=server.ingest.budget)
    server.start()
    ports.put((server.grpc_port, server.http_port))
    stop.wait()
    server.stop()
    stats = server.stats
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    if processes > 1:
        rss += processes * resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    result.put(
        {
            "spans": stats.spans,
            "requests": stats.requests,
            "rejected": stats.rejected,
            "rss_mb": rss,
        }
    )


def client(
    protocol: str, port: int, bodies: list[bytes], spans: int, seconds: float, out: Any
) -> None:
    """Send ``bodies`` round-robin until ``seconds`` pass; report acknowledged spans and time."""
    sent = errors = 0
    cpu = time.process_time()
    start = time.perf_counter()
    deadline = start + seconds
    if protocol == "grpc":
        channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
        )
        export = channel.unary_unary(EXPORT)
        while time.perf_counter() < deadline:
            try:
                export(bodies[sent % len(bodies)], timeout=30)
                sent += 1
            except grpc.RpcError:
                errors += 1
        channel.close()
    else:
        content_type = "application/json" if protocol == "http/json" else "application/x-protobuf"
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.connect()  # TCP_NODELAY, as urllib3 (the SDK's HTTP exporter) sets it
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while time.perf_counter() < deadline:
            connection.request(
                "POST",
                "/v1/traces",
                body=bodies[sent % len(bodies)],
                headers={"Content-Type": content_type},
            )
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                sent += 1
            else:
                errors += 1
        connection.close()
    out.put(
        {
            "spans": sent * spans,
            "errors": errors,
            "elapsed": time.perf_counter() - start,
            "cpu": time.process_time() - cpu,
        }
    )


def spans_on_disk(directory: str) -> int:
    total = 0
    for path in Path(directory).glob("*.jsonl"):
        with path.open() as lines:
            for line in lines:
                data = json.loads(line)
                total += sum(
                    len(s.get("spans", ()))
                    for g in data["resourceSpans"]
                    for s in g.get("scopeSpans", ())
                )
    return total


def _drive(
    protocol: str, port: int, bodies: list[bytes], spans: int, clients: int, seconds: float
) -> list[dict[str, Any]]:
    """Run ``clients`` client processes against ``port`` for ``seconds``; their reports."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=client, args=(protocol, port, bodies, spans, seconds, out))
        for _ in range(clients)
    ]
    for proc in procs:
        proc.start()
    reports = [out.get(timeout=seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    return reports


def _row(reports: list[dict[str, Any]], directory: str, rss_mb: int) -> dict[str, Any]:
    """One table row: spans/s acknowledged and found in ``directory``'s files, errors, memory."""
    elapsed = max(report["elapsed"] for report in reports)
    acked = sum(report["spans"] for report in reports)
    disk = spans_on_disk(directory)
    return {
        "accepted": acked / elapsed,
        "on_disk": disk / elapsed,
        "lost": acked - disk,
        "errors": sum(report["errors"] for report in reports),
        "rss_mb": rss_mb,
        "client_cores": sum(report["cpu"] for report in reports) / elapsed,
    }


def _peak_rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return -1


def run(
    protocol: str,
    legacy: bool,
    bodies: list[bytes],
    spans: int,
    clients: int,
    seconds: float,
    processes: int = 1,
) -> dict[str, Any]:
    """One measurement of this tree's receiver (``legacy``: with the old encoders)."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        ports, stop, result = ctx.Queue(), ctx.Event(), ctx.Queue()
        server = ctx.Process(target=serve, args=(legacy, directory, ports, stop, result, processes))
        server.start()
        grpc_port, http_port = ports.get(timeout=60)
        port = grpc_port if protocol == "grpc" else http_port
        reports = _drive(protocol, port, bodies, spans, clients, seconds)
        stop.set()
        stats = result.get(timeout=60)
        server.join()
        return _row(reports, directory, stats["rss_mb"])


_PORTS = re.compile(r"grpc \S+:(\d+)\s+http \S+:(\d+)")


def run_tree(
    tree: str, protocol: str, bodies: list[bytes], spans: int, clients: int, seconds: float
) -> dict[str, Any]:
    """``run`` against the ``callgate sidecar`` command of source ``tree``, in a subprocess."""
    import subprocess

    code = "import sys; from telemetry.cli import sidecar; sidecar(sys.argv[1:])"
    with tempfile.TemporaryDirectory() as directory:
        ports = ["--grpc-port", "0", "--http-port", "0"]
        process = subprocess.Popen(
            [sys.executable, "-c", code, "--dir", directory, *ports],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": tree},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdout is not None
        found = _PORTS.search(process.stdout.readline())
        if found is None:
            process.kill()
            raise RuntimeError(f"the sidecar of {tree} did not say its ports")
        port = int(found[1] if protocol == "grpc" else found[2])
        reports = _drive(protocol, port, bodies, spans, clients, seconds)
        rss = _peak_rss_mb(process.pid)
        process.terminate()
        process.wait(60)
        return _row(reports, directory, rss)


def bomb_rss(tree: str, clients: int, each: int) -> str:
    """Peak RSS of ``callgate sidecar`` (from source ``tree``) while ``clients`` threads each send
    ``each`` 1 MiB gzip bodies that inflate to 1 GiB of zeros over OTLP/HTTP."""
    import subprocess
    import threading
    import zlib

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = "import sys; from telemetry.cli import sidecar; sidecar(sys.argv[1:])"
    with tempfile.TemporaryDirectory() as directory:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                code,
                "--dir",
                directory,
                "--grpc-port",
                "-1",
                "--http-port",
                str(port),
            ],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": tree},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        zeros = bytes(1 << 20)
        bomb = b"".join(packer.compress(zeros) for _ in range(1024)) + packer.flush()
        head = (
            "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
        ).encode()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

        idle = _peak_rss_mb(process.pid)
        answers: list[str] = []

        def send() -> None:
            for _ in range(each):
                with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
                    sock.sendall(head + bomb)
                    sock.shutdown(socket.SHUT_WR)
                    first = sock.recv(64)
                    answers.append(first.split(b" ")[1].decode() if first else "no answer")

        threads = [threading.Thread(target=send) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        result = _peak_rss_mb(process.pid)
        process.terminate()
        process.wait(30)
    return (
        f"compression bomb: {len(bomb) / 2**20:.2f} MiB gzip -> 1024 MiB, {clients} clients x {each}: "
        f"answers {sorted(set(answers))}, sidecar peak RSS {result} MiB (idle {idle} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bomb",
        action="store_true",
        help="instead: the sidecar's peak RSS under gzip bombs (see --tree, --bomb-clients)",
    )
    parser.add_argument(
        "--tree",
        default=str(Path(__file__).resolve().parents[1]),
        help="source tree whose sidecar --bomb runs (e.g. an export of main)",
    )
    parser.add_argument("--bomb-clients", type=int, default=1)
    parser.add_argument("--bomb-each", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--spans", type=int, default=512, help="spans per request")
    parser.add_argument("--rounds", type=int, default=2, help="baseline/new pairs per protocol")
    parser.add_argument("--protocol", choices=PROTOCOLS, action="append")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="encoding worker processes of the new path's sidecar (OTLPReceiver(processes=N))",
    )
    parser.add_argument(
        "--baseline-tree",
        help="also run this source tree's `callgate sidecar` as a baseline (e.g. the issue's commit)",
    )
    args = parser.parse_args()
    if args.bomb:
        print(bomb_rss(args.tree, args.bomb_clients, args.bomb_each))
        return
    requests = make_requests(args.spans)
    encodings = {
        "grpc": [r.SerializeToString() for r in requests],
        "http/protobuf": [r.SerializeToString() for r in requests],
        "http/json": [request_to_json(r).encode() for r in requests],
    }
    print(
        f"sidecar ingest: {args.clients} clients, {args.spans}-span requests, {args.seconds:g} s a run, "
        f"best of {args.rounds}; new path --processes {args.processes}; "
        f"{os.cpu_count()} cores, shared with whatever else runs"
    )
    print(
        f"{'protocol':<15}{'path':<10}{'accepted/s':>12}{'on disk/s':>12}{'lost':>6}{'errors':>8}{'RSS MB':>8}{'clients':>9}"
    )
    paths = ["baseline", "new"] + (["tree"] if args.baseline_tree else [])
    for protocol in args.protocol or PROTOCOLS:
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.rounds):
            for path in paths:
                bodies = encodings[protocol]
                if path == "tree":
                    row = run_tree(
                        args.baseline_tree, protocol, bodies, args.spans, args.clients, args.seconds
                    )
                else:
                    row = run(
                        protocol,
                        path == "baseline",
                        bodies,
                        args.spans,
                        args.clients,
                        args.seconds,
                        args.processes,
                    )
                if path not in best or row["on_disk"] > best[path]["on_disk"]:
                    best[path] = row
        for path in paths:
            row = best[path]
            print(
                f"{protocol:<15}{path:<10}{row['accepted']:>12,.0f}"
                f"{row['on_disk']:>12,.0f}{row['lost']:>6}{row['errors']:>8}{row['rss_mb']:>8}"
                f"{row['client_cores']:>8.2f}c"
            )
        for path in paths:
            if path != "new":
                ratio = best["new"]["on_disk"] / best[path]["on_disk"]
                print(f"{protocol:<15}{'ratio':<10}{ratio:>12.1f}x  (new / {path})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
