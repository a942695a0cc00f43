"""Where a follow round's time goes, statement by statement, replayed from a kept run's span files.

    .venv/bin/python bench/freshness.py --rate 20000 --seconds 40 --keep /tmp/keep
    .venv/bin/python bench/follow_rounds.py /tmp/keep

cProfile sees a DuckDB statement as one call of the Python line that ran it, so a profile of the
follower (``freshness.py --profile``) says which function is slow, not which statement. This
script runs the real :func:`analytics.follow.follow` on a new database and times every statement
and every ``connect``/``close`` it makes (through a thin wrapper around the connections it opens),
grouped by the statement's text with its numbers blanked.

The kept files are replayed in name order into one growing file, a chunk of whole lines at a
time: one chunk before the first round, the next once a round has loaded everything written, so
each round loads about ``--round-bytes`` of new lines, as a follower that has fallen behind does.
The rate is the follower's capacity (spans/s when it never waits), not a freshness figure:
``freshness.py`` gives that. Printed: rounds, spans, wall time and spans/s, the mean round in the
first and last third (flat: a round costs what its new spans cost), peak RSS, and the statements
that took longest, with their share of the wall time and their milliseconds per round.
"""

from __future__ import annotations

import argparse
import collections
import re
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT))

import analytics.follow  # noqa: E402,F401  (the module, not the function the package exports)
from analytics.load import LoadReport  # noqa: E402

follow_module = sys.modules["analytics.follow"]

_NUMBERS = re.compile(r"'?\d{4}-\d\d-\d\d[ T][\d:.]+'?|\b\d+\b")

seconds: dict[str, float] = collections.defaultdict(float)
counts: dict[str, int] = collections.defaultdict(int)


def _key(sql: object) -> str:
    return _NUMBERS.sub("N", " ".join(str(sql).split()))[:100]


def _timed(key: str, started: float) -> None:
    seconds[key] += time.perf_counter() - started
    counts[key] += 1


class TimedConnection:
    """A DuckDB connection whose ``execute`` and ``close`` are timed; the rest passes through."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def execute(self, sql: object, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._con.execute(sql, *args, **kwargs)
        finally:
            _timed(_key(sql), started)

    def close(self) -> None:
        started = time.perf_counter()
        self._con.close()
        _timed("<close: checkpoint>", started)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def _chunks(files: list[Path], size: int) -> Iterator[bytes]:
    """The files' bytes in chunks of whole lines, each a little under ``size``."""
    for path in files:
        with path.open("rb") as stream:
            while data := stream.read(max(1, size - (64 << 10))):
                yield data + stream.readline()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spans", type=Path, help="a directory of span files (freshness --keep)")
    parser.add_argument(
        "--round-bytes", type=int, default=follow_module.ROUND_BYTES, help="new bytes per round"
    )
    parser.add_argument("--top", type=int, default=20, help="statements to print")
    args = parser.parse_args()
    files = sorted(args.spans.glob("*.jsonl"))
    if not files:
        parser.error(f"no *.jsonl files in {args.spans}")

    opened = follow_module.connect

    def connect(path: Any, *a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        con = TimedConnection(opened(path, *a, **k))
        _timed("<connect>", started)
        return con

    setattr(follow_module, "connect", connect)  # noqa: B010  (the follower opens through it)
    chunks = _chunks(files, args.round_bytes)
    with tempfile.TemporaryDirectory(prefix="callgate-follow-rounds-") as tmp:
        spans_dir = Path(tmp) / "spans"
        spans_dir.mkdir()
        growing = (spans_dir / "spans.jsonl").open("ab")
        spans = 0
        rounds: list[float] = []
        done = False
        last = time.perf_counter()

        def feed() -> None:
            nonlocal done
            data = next(chunks, None)
            if data is None:
                done = True
            else:
                growing.write(data)
                growing.flush()

        def on_load(report: LoadReport) -> None:
            nonlocal spans, last
            now = time.perf_counter()
            rounds.append(now - last)
            last = now
            spans += report.spans
            if not report.more:
                feed()

        feed()
        started = time.perf_counter()
        follow_module.follow(
            Path(tmp) / "follow.duckdb",
            [spans_dir],
            interval=0.0,
            on_load=on_load,
            should_stop=lambda: done,
            round_bytes=args.round_bytes,
        )
        wall = time.perf_counter() - started
        growing.close()

    third = max(1, len(rounds) // 3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(rounds)} rounds, {spans:,} spans in {wall:.1f} s = {spans / wall:,.0f} spans/s; "
        f"mean round {sum(rounds[:third]) / third:.3f} s in the first third, "
        f"{sum(rounds[-third:]) / third:.3f} s in the last; peak RSS {rss:.0f} MiB"
    )
    print(f"{'seconds':>8} {'wall':>6} {'count':>6} {'ms/round':>9}  statement")
    for key, spent in sorted(seconds.items(), key=lambda item: -item[1])[: args.top]:
        share = 100 * spent / wall
        per_round = 1000 * spent / max(1, len(rounds))
        print(f"{spent:8.2f} {share:5.1f}% {counts[key]:6d} {per_round:9.1f}  {key}")


if __name__ == "__main__":
    main()
