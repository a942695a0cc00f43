"""Benchmark the analytics loader and metrics against DuckDB baselines on the same files.

    .venv/bin/python bench/analytics.py                 # 1M and 10M spans
    .venv/bin/python bench/analytics.py --sizes 1000000 --repeat 3

For each size: generate a span file once (cached in --dir) in the span contract's encoding, then,
interleaved so machine noise hits all alike, load it

- ``baseline-ndjson``: ``read_ndjson_objects`` + ``json_extract`` of the span list + ``from_json``
  into typed columns (attributes left as a list), CREATE TABLE in a fresh DuckDB file;
- ``baseline-typed``: the same plus one typed column per contract attribute, each found with a
  ``list_filter`` lambda (the straightforward way to get the columns callgate keeps);
- ``baseline-struct``: ``read_json`` with an explicit STRUCT and ``unnest`` (1M only by default);
- ``callgate``: ``analytics.load.load`` into a fresh database (typed contract columns, all
  attributes kept, calls table, stage links, recovery ranks);

and report spans/s, MB/s, wall and CPU seconds (best of --repeat), then each metric's latency on the
loaded database (median and worst of 5 runs after a warm-up; plain, as a ~100-bucket series,
and filtered to one tool).
Timings, never assertions: the goals are printed beside the numbers.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

# This file is bench/analytics.py: run as a script, its directory comes first on sys.path and
# would shadow the analytics package. Put the repository root there instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import duckdb  # noqa: E402

from analytics import metrics  # noqa: E402
from analytics.load import connect, load  # noqa: E402
from analytics.synth import SpanFileWriter, generate  # noqa: E402

_VALUE = (
    '{"stringValue":"VARCHAR","intValue":"BIGINT","boolValue":"BOOLEAN","doubleValue":"DOUBLE",'
    '"arrayValue":{"values":[{"stringValue":"VARCHAR"}]}}'
)
_ATTRS = '[{"key":"VARCHAR","value":' + _VALUE + "}]"
_SPAN = (
    '{"traceId":"VARCHAR","spanId":"VARCHAR","parentSpanId":"VARCHAR","name":"VARCHAR",'
    '"kind":"INTEGER","startTimeUnixNano":"UBIGINT","endTimeUnixNano":"UBIGINT",'
    '"attributes":' + _ATTRS + ',"events":[{"timeUnixNano":"UBIGINT","name":"VARCHAR",'
    '"attributes":' + _ATTRS + '}],"status":{"code":"INTEGER","message":"VARCHAR"}}'
)
_STRUCT_SPAN = (
    "STRUCT(traceId VARCHAR, spanId VARCHAR, parentSpanId VARCHAR, name VARCHAR, kind INTEGER, "
    "startTimeUnixNano UBIGINT, endTimeUnixNano UBIGINT, attributes STRUCT(key VARCHAR, "
    "value STRUCT(stringValue VARCHAR, intValue BIGINT, boolValue BOOLEAN, doubleValue DOUBLE))[],"
    " status STRUCT(code INTEGER, message VARCHAR))"
)

BASELINE_NDJSON = f"""
CREATE TABLE spans AS
SELECT s.traceId, s.spanId, s.parentSpanId, s.name, s.kind, s.startTimeUnixNano,
       s.endTimeUnixNano, s.attributes, s.events, s.status
FROM (
    SELECT from_json(unnest(json_extract(json, '$.resourceSpans[*].scopeSpans[*].spans[*]')),
                     '{_SPAN}') AS s
    FROM read_ndjson_objects(?)
)
"""


def _typed_baseline() -> str:
    """The first baseline plus one typed column per contract attribute, written the idiomatic way:
    ``list_filter(attributes, lambda a: a.key = '...')[1].value.<type>`` per column."""
    from analytics.schema import COLUMNS

    def column(c: Any) -> str:
        found = f"list_filter(s.attributes, lambda a: a.key = '{c.attribute}')[1].value"
        if c.otlp == "arrayValue":
            return (
                f'list_transform({found}.arrayValue."values", lambda v: v.stringValue) AS {c.name}'
            )
        return f"{found}.{c.otlp} AS {c.name}"

    columns = ",\n       ".join(column(c) for c in COLUMNS)
    return BASELINE_NDJSON.replace(
        "s.endTimeUnixNano, s.attributes,", f"s.endTimeUnixNano, {columns}, s.attributes,"
    )


BASELINE_STRUCT = f"""
CREATE TABLE spans AS
SELECT s.* FROM (
    SELECT unnest(ss.spans) AS s FROM (
        SELECT unnest(rs.scopeSpans) AS ss FROM (
            SELECT unnest(resourceSpans) AS rs
            FROM read_json(?, format = 'newline_delimited', maximum_object_size = 67108864,
                           columns = {{'resourceSpans': 'STRUCT(scopeSpans STRUCT(
                               spans {_STRUCT_SPAN}[])[])[]'}})
        )
    )
)
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _fresh(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        if p.exists():
            p.unlink()


def _encoder_name() -> str:
    try:
        from telemetry.otlpjson import encode_spans  # noqa: F401
    except Exception:
        return "analytics.synth (telemetry's encoder not importable)"
    return "analytics.synth (same encoding as telemetry.otlpjson; its API is still moving)"


def make_file(directory: Path, spans: int) -> Path:
    """The span file for ``spans`` spans, generated once."""
    path = directory / f"spans-{spans}.json"
    if path.exists() and path.stat().st_size > 0:
        return path
    started = time.perf_counter()
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", encoding="utf-8") as stream:
        writer = SpanFileWriter(stream, batch=512)
        for call in generate(spans=spans, seed=spans):
            writer.write(call)
        writer.close()
    tmp.rename(path)
    print(
        f"  generated {path} ({path.stat().st_size / 1e9:.2f} GB) "
        f"in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    return path


def _run_baseline(sql: str, source: Path, db: Path) -> tuple[float, float, int]:
    _fresh(db)
    con = duckdb.connect(str(db))
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET enable_progress_bar = false")
        cpu, wall = _cpu(), time.perf_counter()
        con.execute(sql, [str(source)])
        con.execute("CHECKPOINT")
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
        rows = int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])
    finally:
        con.close()
    return wall, cpu, rows


def _run_callgate(source: Path, db: Path) -> tuple[float, float, int]:
    _fresh(db)
    con = connect(db)
    try:
        cpu, wall = _cpu(), time.perf_counter()
        report = load(con, [source])
        con.execute("CHECKPOINT")
        wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    finally:
        con.close()
    return wall, cpu, report.spans


def bench_load(source: Path, work: Path, repeat: int, struct: bool, typed: bool) -> Path:
    """Load ``source`` with each loader, interleaved; print the best run of each."""
    size = source.stat().st_size
    runners: dict[str, Callable[[], tuple[float, float, int]]] = {
        "baseline-ndjson": lambda: _run_baseline(BASELINE_NDJSON, source, work / "base.duckdb"),
        "callgate": lambda: _run_callgate(source, work / "callgate.duckdb"),
    }
    if typed:
        typed_sql = _typed_baseline()
        runners["baseline-typed"] = lambda: _run_baseline(typed_sql, source, work / "typed.duckdb")
    if struct:
        runners["baseline-struct"] = lambda: _run_baseline(
            BASELINE_STRUCT, source, work / "struct.duckdb"
        )
    results: dict[str, list[tuple[float, float, int]]] = {name: [] for name in runners}
    for _ in range(repeat):
        for name, run in runners.items():
            results[name].append(run())
    print(
        f"  {'loader':<16} {'spans':>10} {'best s':>8} {'cpu s':>8} {'spans/s':>10} "
        f"{'MB/s':>7} {'all runs (s)'}"
    )
    best: dict[str, float] = {}
    for name, runs in results.items():
        wall, cpu, rows = min(runs)
        best[name] = rows / wall
        runs_text = " ".join(f"{w:.1f}" for w, _, _ in runs)
        print(
            f"  {name:<16} {rows:>10,} {wall:>8.2f} {cpu:>8.2f} {rows / wall:>10,.0f} "
            f"{size / wall / 1e6:>7.1f} {runs_text}"
        )
    for base in (b for b in ("baseline-ndjson", "baseline-typed") if b in best):
        print(f"  callgate / {base} throughput: {best['callgate'] / best[base]:.2f}x")
    print("  goal: >= 1.00x the ndjson baseline and >= 150,000 spans/s")
    for db in ("base.duckdb", "typed.duckdb", "struct.duckdb"):
        _fresh(work / db)
    return work / "callgate.duckdb"


METRICS: list[tuple[str, Callable[..., Any], dict[str, Any]]] = [
    ("overview", metrics.overview, {}),
    ("rejection_rate[tool]", metrics.rejection_rate, {"by": "tool"}),
    ("rejection_rate[code]", metrics.rejection_rate, {"by": "code"}),
    ("invalid_fields", metrics.invalid_fields, {}),
    ("recovery_rate", metrics.recovery_rate, {"k": 3}),
    ("replays", metrics.replays, {}),
    ("loop_guards", metrics.loop_guards, {}),
    ("stuck_sessions", metrics.stuck_sessions, {}),
    ("confirmation_funnel", metrics.confirmation_funnel, {}),
    ("stage_latency", metrics.stage_latency, {}),
    ("filter_options", metrics.filter_options, {}),
]


def _time(function: Callable[[], Any], runs: int = 5) -> tuple[float, float, float]:
    """(median wall ms, worst wall ms, median CPU ms of this process).

    CPU time is quoted beside wall time because on a shared machine wall time mostly measures
    the other processes; on an idle 2-core machine wall time is at least CPU time / 2.
    """
    function()
    samples, cpu = [], []
    for _ in range(runs):
        started, used = time.perf_counter(), _cpu()
        function()
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((_cpu() - used) * 1000)
    return statistics.median(samples), max(samples), statistics.median(cpu)


def _fmt(t: tuple[float, float, float] | None) -> str:
    return f"{t[0]:.0f} / {t[1]:.0f} ({t[2]:.0f})" if t else "-"


def bench_metrics(db: Path) -> None:
    """Each metric's latency on the loaded database: plain, as a time series of about 100
    buckets (what a dashboard chart asks for), and filtered to one tool."""
    con = connect(db, read_only=True)
    try:
        spans = int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])
        options = metrics.filter_options(con)
        assert options.first is not None and options.last is not None
        hours = (options.last - options.first).total_seconds() / 3600
        step = timedelta(hours=max(1, math.ceil(hours / 100)))
        print(
            f"  metrics on {spans:,} spans over {hours:.0f} h "
            "(ms: median / worst wall of 5 (median CPU); goal < 100)"
        )
        print(
            f"  {'metric':<22} {'plain':>18} {'series':>18} {'filtered (1 tool)':>18}"
            f"   series = about 100 buckets of {step}, as a dashboard asks"
        )
        tool = options.tools[0]
        one_tool = metrics.Filters(tools=(tool,))
        worst = worst_cpu = 0.0
        for name, function, kwargs in METRICS:
            plain = _time(lambda f=function, k=kwargs: f(con, **k))
            if name in ("stuck_sessions", "filter_options"):
                series: tuple[float, float, float] | None = None
                filtered: tuple[float, float, float] | None = None
            else:
                series = _time(lambda f=function, k=kwargs: f(con, bucket=step, **k))
                filtered = _time(lambda f=function, k=kwargs: f(con, one_tool, **k))
            worst = max(worst, plain[1], *(s[1] for s in (series, filtered) if s))

            worst_cpu = max(worst_cpu, plain[2], *(s[2] for s in (series, filtered) if s))
            print(f"  {name:<22} {_fmt(plain):>18} {_fmt(series):>18} {_fmt(filtered):>18}")
        reference = _time(
            lambda: con.execute("SELECT count(DISTINCT session) FROM calls").fetchall()
        )
        print(f"  {'ref: distinct sessions':<22} {_fmt(reference):>18}")
        print(f"  worst metric latency: {worst:.1f} ms wall, {worst_cpu:.1f} ms CPU")
    finally:
        con.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument(
        "--dir", default=os.environ.get("CALLGATE_BENCH_DIR", "/tmp/callgate-bench")
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--struct-max",
        type=int,
        default=1_000_000,
        help="run the read_json STRUCT baseline up to this many spans",
    )
    parser.add_argument(
        "--typed-max",
        type=int,
        default=1_000_000,
        help="run the list_filter typed baseline up to this many spans",
    )
    parser.add_argument(
        "--metrics-only",
        action="store_true",
        help="skip the loads: time the metrics on the database a previous run left in --dir",
    )
    args = parser.parse_args(argv)
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"callgate analytics bench: duckdb {duckdb.__version__}, {os.cpu_count()} cpus; "
        f"encoder: {_encoder_name()}"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"\n== {size:,} spans", flush=True)
        if args.metrics_only:
            bench_metrics(work / "callgate.duckdb")
            continue
        source = make_file(work, size)
        db = bench_load(
            source,
            work,
            args.repeat,
            struct=size <= args.struct_max,
            typed=size <= args.typed_max,
        )
        bench_metrics(db)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
