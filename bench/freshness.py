"""Freshness: how long a span takes from being sent to the sidecar to being queryable in DuckDB.

    .venv/bin/python bench/freshness.py --rate 20000 --seconds 120
    .venv/bin/python bench/freshness.py --rate 50000 --seconds 600

One run starts a real ``callgate sidecar`` (OTLP/HTTP on a free loopback port) and a real
``callgate load DIR --follow --interval 1`` on the directory it writes, then ``--senders``
processes post 512-span OTLP/protobuf requests at a steady ``--rate`` spans/s in all for
``--seconds`` (request k is due at start + k x 512 / rate; sender i posts k = i mod senders).
Every request is the same synthetic traffic (calls with their stage spans, ``analytics.synth``)
with its own trace ids (the first 4 bytes number the request) and its times moved to when it is
due, written into the serialized template's bytes (:class:`Stamper`); its sessions continue from
request to request, so they grow through the whole run (the long sessions the loader must not
re-derive whole every round). A run whose senders did not reach 90% of ``--rate`` is refused
(exit status 1, no table): it would measure the sender, not the loader.

Meanwhile this process opens the database read-only every ``--poll`` seconds, as the dashboard
does, and notes when each request's spans are first there: delay = seen - sent. An open that
finds the file locked by the loader is counted ("busy") and retried after 10 ms.

Printed: the delay's p50 and p99 in each third of the run (by send time; lag is flat when the last
third is no worse than the first), the rate sent and the rate loaded, the loader's peak RSS
(VmHWM), the busy opens, and the baseline of the same run: a bulk ``callgate load`` of the same
span files into a new database, spans/s. Timings, never assertions.

``--profile FILE`` runs the follower under cProfile and writes its stats to FILE when it stops
(``python -m pstats FILE``): where a round's time goes, at the rate of the run. DuckDB's
statements are opaque to it: ``bench/follow_rounds.py`` replays ``--keep``'s files through the
follower and times each statement of a round.

``--tree PATH`` runs the loader (follow and bulk) of another source tree, for the "before":
``git archive 251ee73 | tar -x -C /tmp/before && bench/freshness.py --tree /tmp/before``.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import multiprocessing as mp
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_ROOT))

from analytics.synth import encode_request, generate, spans_of  # noqa: E402
from telemetry.otlpjson import parse_request  # noqa: E402

CALLGATE = [sys.executable, "-m", "callgate"]


def template(spans: int) -> bytes:
    """One request of about ``spans`` spans: synthetic calls 1 ms apart, serialized protobuf."""
    calls = []
    made = 0
    for index, call in enumerate(generate(spans=spans * 2, seed=7, services=("bench",))):
        call = dataclasses.replace(call, start_ns=10**15 + index * 1_000_000)
        size = len(call.stages) + 1
        if made + size > spans:
            break
        calls.append(call)
        made += size
    records = [record for call in calls for record in spans_of(call)]
    return parse_request(encode_request(records, "bench")).SerializeToString()


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _fields(data: bytes, begin: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """Protobuf fields of ``data[begin:end]``: (number, wire type, value start, value end)."""
    at = begin
    while at < end:
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, after = _varint(data, at)
        elif wire == 1:
            after = at + 8
        elif wire == 2:
            size, at = _varint(data, at)
            after = at + size
        elif wire == 5:
            after = at + 4
        else:
            raise ValueError(f"wire type {wire} in a trace request")
        yield number, wire, at, after
        at = after


def _children(data: bytes, begin: int, end: int, number: int) -> Iterator[tuple[int, int]]:
    for field_number, wire, start, stop in _fields(data, begin, end):
        if field_number == number and wire == 2:
            yield start, stop


class Stamper:
    """Copies of one serialized request with new trace ids and times, made by patching bytes.

    A span's ``trace_id`` (16 bytes) and start and end times (fixed64) sit at fixed offsets of
    the serialized request, so a request for send time ``t`` is the template with those bytes
    rewritten (numpy, a few microseconds) instead of a protobuf object re-serialized (about 10
    ms a request, which kept one sender under 5,000 spans/s).
    """

    def __init__(self, body: bytes) -> None:
        traces: list[int] = []
        times: list[int] = []
        for rs in _children(body, 0, len(body), 1):  # ExportTraceServiceRequest.resource_spans
            for ss in _children(body, *rs, 2):  # ResourceSpans.scope_spans
                for span in _children(body, *ss, 2):  # ScopeSpans.spans
                    for number, wire, start, stop in _fields(body, *span):
                        if number == 1 and wire == 2 and stop - start == 16:
                            traces.append(start)
                        elif number in (7, 8) and wire == 1:  # start, end_time_unix_nano
                            times.append(start)
        self.template = np.frombuffer(body, dtype=np.uint8)
        self.spans = len(traces)
        self._prefix = np.array(traces, dtype=np.int64)[:, None] + np.arange(4)
        self._times = np.array(times, dtype=np.int64)[:, None] + np.arange(8)
        self._original = self.template[self._times].copy().view("<u8").ravel()
        self._last = int(self._original.max())

    def request(self, number: int, end_ns: int) -> bytes:
        """The template with trace ids starting with ``number`` (4 bytes) and its last span
        ending at ``end_ns``."""
        out = self.template.copy()
        out[self._prefix] = np.frombuffer(number.to_bytes(4, "big"), dtype=np.uint8)
        moved = self._original + np.uint64(end_ns - self._last)
        out[self._times] = moved.view(np.uint8).reshape(-1, 8)
        return out.tobytes()


def sender(
    port: int,
    rate: float,
    seconds: float,
    spans: int,
    start: float,
    lane: tuple[int, int],
    out: Any,
) -> None:
    """Post requests ``index``, ``index + senders``, ... (``lane``), each when it is due: request
    k at ``start + k / (rate / spans)``; report (k, sent) pairs and spans per request."""
    index, senders = lane
    stamper = Stamper(template(spans))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    every = stamper.spans / rate
    sent: list[tuple[int, float]] = []
    k = index
    headers = {"Content-Type": "application/x-protobuf"}
    while start + k * every < start + seconds:
        due = start + k * every
        body = stamper.request(k, int(due * 1e9))  # prepared before it is due
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        when = time.time()
        connection.request("POST", "/v1/traces", body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status == 200:
            sent.append((k, when))
        k += senders
    connection.close()
    out.put({"sent": sent, "spans": stamper.spans, "end": time.time()})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the sidecar did not listen on {port}")


def open_read_only(database: Path) -> tuple[duckdb.DuckDBPyConnection | None, int]:
    """A read-only connection (None while the file does not exist yet) and how many tries found
    the file locked."""
    busy = 0
    while True:
        if not database.exists():
            return None, busy
        try:
            return duckdb.connect(str(database), read_only=True), busy
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower():
                raise
            busy += 1
            time.sleep(0.01)
        except duckdb.Error:
            return None, busy  # the loader has not created its tables yet


def poll(database: Path, seen: dict[int, float], last_batch: int) -> tuple[int, int]:
    """Note the requests that arrived since ``last_batch``; return (the newest batch, busy tries)."""
    con, busy = open_read_only(database)
    if con is None:
        return last_batch, busy
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
        if "span_rows" not in tables:
            return last_batch, busy
        newest = con.execute("SELECT coalesce(max(batch), 0) FROM span_rows").fetchall()[0][0]
        if newest > last_batch:
            now = time.time()
            for (marker,) in con.execute(
                "SELECT DISTINCT substr(trace_id, 1, 8) FROM span_rows WHERE batch > ?",
                [last_batch],
            ).fetchall():
                seen.setdefault(int(marker, 16), now)
        return int(newest), busy
    finally:
        con.close()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> None:
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    loader_env = {**os.environ, "PYTHONPATH": str(args.tree or _ROOT)}
    with tempfile.TemporaryDirectory(prefix="callgate-freshness-") as tmp:
        spans_dir = Path(tmp) / "spans"
        spans_dir.mkdir()
        database = Path(tmp) / "follow.duckdb"
        port = free_port()
        sidecar = subprocess.Popen(
            [
                *CALLGATE,
                "sidecar",
                "--dir",
                str(spans_dir),
                "--grpc-port",
                "-1",
                "--http-port",
                str(port),
                "--processes",
                str(args.processes),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        profiled = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
        loader = subprocess.Popen(
            [
                sys.executable,
                *profiled,
                "-m",
                "callgate",
                "load",
                str(spans_dir),
                "--db",
                str(database),
                "--follow",
                "--interval",
                str(args.interval),
            ],
            env=loader_env,
            stdout=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port)
            ctx = mp.get_context("spawn")
            out = ctx.Queue()
            start = time.time() + 3.0  # every sender imported and its template built by then
            senders = [
                ctx.Process(
                    target=sender,
                    args=(port, args.rate, args.seconds, args.spans, start, (i, args.senders), out),
                )
                for i in range(args.senders)
            ]
            for proc in senders:
                proc.start()
            seen: dict[int, float] = {}
            batch = busy = opens = 0
            reports: list[dict[str, Any]] = []
            while len(reports) < len(senders):
                batch, tries = poll(database, seen, batch)
                busy += tries > 0
                opens += 1
                time.sleep(args.poll)
                while not out.empty():
                    reports.append(out.get())
            for proc in senders:
                proc.join()
            report = {
                "sent": [pair for r in reports for pair in r["sent"]],
                "spans": reports[0]["spans"],
                "seconds": max(r["end"] for r in reports) - start,
            }
            sent = dict(report["sent"])
            refuse_slow_senders(args, report)
            deadline = time.monotonic() + args.drain
            while set(sent) - set(seen) and time.monotonic() < deadline:
                batch, tries = poll(database, seen, batch)
                busy += tries > 0
                opens += 1
                time.sleep(args.poll)
            rss = peak_rss_mb(loader.pid)
        finally:
            for process, sig in ((loader, signal.SIGINT), (sidecar, signal.SIGTERM)):
                process.send_signal(sig)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if args.keep:
            shutil.copytree(spans_dir, args.keep, dirs_exist_ok=True)
        bulk = Path(tmp) / "bulk.duckdb"
        started = time.perf_counter()
        subprocess.run(
            [*CALLGATE, "load", str(spans_dir), "--db", str(bulk)],
            env=loader_env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        bulk_seconds = time.perf_counter() - started
        with duckdb.connect(str(bulk), read_only=True) as con:
            bulk_spans = con.execute("SELECT count(*) FROM span_rows").fetchall()[0][0]
        with duckdb.connect(str(database), read_only=True) as con:
            follow_spans = con.execute("SELECT count(*) FROM span_rows").fetchall()[0][0]
    report_table(args, report, sent, seen, rss, busy, opens, bulk_spans, bulk_seconds, follow_spans)


def refuse_slow_senders(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Exit (status 1, no table) when the senders did not reach 90% of ``--rate``: such a run
    measures the sender or the sidecar, not the loader."""
    spans = len(report["sent"]) * report["spans"]
    rate = spans / report["seconds"]
    if rate < 0.9 * args.rate:
        sys.exit(
            f"refused: {rate:,.0f} spans/s sent ({spans:,} spans acknowledged in "
            f"{report['seconds']:.0f} s), under 90% of the {args.rate:,.0f} asked; try more "
            "--senders or --processes"
        )


def report_table(
    args: argparse.Namespace,
    report: dict[str, Any],
    sent: dict[int, float],
    seen: dict[int, float],
    rss: float,
    busy: int,
    opens: int,
    bulk_spans: int,
    bulk_seconds: float,
    follow_spans: int,
) -> None:
    per = report["spans"]
    sent_rate = len(sent) * per / report["seconds"]
    ordered = sorted(sent)
    delays = [seen[k] - sent[k] for k in ordered if k in seen]
    thirds = [ordered[i * len(ordered) // 3 : (i + 1) * len(ordered) // 3] for i in range(3)]
    missing = len(set(sent) - set(seen))
    arrived = [seen[k] for k in ordered if k in seen]
    span_of_load = (max(arrived) - min(sent.values())) if arrived else float("nan")
    print(
        f"freshness: {args.rate:,.0f} spans/s asked for {args.seconds:.0f} s, {per}-span requests,"
        f" --interval {args.interval}, read-only polls every {args.poll} s"
        + (f", loader of {args.tree}" if args.tree else "")
    )
    print(f"{'third':<8}{'requests':>10}{'p50 s':>8}{'p99 s':>8}{'max s':>8}")
    for index, third in enumerate(thirds, 1):
        values = [seen[k] - sent[k] for k in third if k in seen]
        print(
            f"{index:<8}{len(third):>10}{percentile(values, 0.5):>8.2f}"
            f"{percentile(values, 0.99):>8.2f}{max(values, default=float('nan')):>8.2f}"
        )
    print(
        f"{'all':<8}{len(ordered):>10}{percentile(delays, 0.5):>8.2f}"
        f"{percentile(delays, 0.99):>8.2f}{max(delays, default=float('nan')):>8.2f}"
    )
    print(f"sent: {sent_rate:,.0f} spans/s sustained ({len(sent) * per:,} spans)")
    print(
        f"loaded: {follow_spans:,} spans, {len(seen) * per / span_of_load:,.0f} spans/s "
        f"send-to-queryable over the run; {missing} requests never seen"
    )
    print(f"loader peak RSS: {rss:.0f} MiB")
    print(f"read-only opens: {opens}, found the file busy: {busy}")
    print(
        f"baseline (same run): bulk `callgate load` of the same files: {bulk_spans:,} spans in "
        f"{bulk_seconds:.1f} s = {bulk_spans / bulk_seconds:,.0f} spans/s"
    )
    print(f"goal: p99 < 2 s, last third no worse than first, RSS < 300 MiB, busy {0}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=20_000, help="spans/s to send")
    parser.add_argument("--seconds", type=float, default=120, help="how long to send")
    parser.add_argument("--spans", type=int, default=512, help="spans per request")
    parser.add_argument("--interval", type=float, default=1.0, help="load --follow --interval")
    parser.add_argument("--poll", type=float, default=0.1, help="seconds between reader opens")
    parser.add_argument("--processes", type=int, default=1, help="callgate sidecar --processes")
    parser.add_argument("--senders", type=int, default=4, help="sending processes")
    parser.add_argument("--tree", type=Path, help="run this source tree's loader instead")
    parser.add_argument("--keep", type=Path, help="copy the span files here (for profiling)")
    parser.add_argument("--profile", type=Path, help="write the follower's cProfile stats here")
    parser.add_argument("--drain", type=float, default=120, help="seconds to wait for the rest")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
