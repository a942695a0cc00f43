"""Parquet export: the spans, partitioned by day, for long-term storage and DuckDB over object storage.

The layout is Hive-style, ``DIR/day=2026-01-01/spans_0.parquet``, so that
``read_parquet('DIR/**/*.parquet', hive_partitioning = true)`` prunes whole days on a ``day`` filter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

__all__ = ["EXPORT_SQL", "ParquetExport", "export_parquet"]

EXPORT_SQL = """
COPY (
    SELECT * EXCLUDE (file_id, batch), CAST(start_time AS DATE) AS day
    FROM spans
    ORDER BY day, trace_id, start_time
) TO {target} (
    FORMAT parquet, PARTITION_BY (day), OVERWRITE_OR_IGNORE, FILENAME_PATTERN 'spans_{{i}}',
    COMPRESSION zstd
)
"""
"""Every span with a ``day`` partition column; a trace's spans are written next to each other."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ParquetExport:
    """What an export wrote."""

    directory: str
    spans: int
    days: tuple[str, ...]
    """The ``day=YYYY-MM-DD`` partitions written."""


def export_parquet(
    con: duckdb.DuckDBPyConnection, directory: str | os.PathLike[str]
) -> ParquetExport:
    """Write all spans to ``directory`` as Parquet partitioned by day; days already there are
    rewritten, other files left alone."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    literal = "'" + str(target).replace("'", "''") + "'"
    con.execute(EXPORT_SQL.format(target=literal))
    spans = int(con.execute("SELECT count(*) FROM spans").fetchall()[0][0])
    days = tuple(sorted(p.name for p in target.iterdir() if p.name.startswith("day=")))
    return ParquetExport(directory=str(target), spans=spans, days=days)
