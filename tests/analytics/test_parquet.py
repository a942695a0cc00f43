"""Parquet export, partitioned by day."""

from __future__ import annotations

from pathlib import Path

import duckdb

from analytics.load import connect, load
from analytics.parquet import export_parquet
from analytics.synth import Call, write_span_file

from .conftest import T0_NS, dataset, span_count

DAY = 24 * 3600 * 1_000_000_000


class TestParquetExport:
    def test_partitions_by_day_and_round_trips(self, tmp_path: Path):
        """Spans of two days land in two day= partitions and read back complete."""
        calls = dataset()
        later = [
            Call(
                trace_id="ff".ljust(32, "c"),
                span_id="ff".ljust(16, "d"),
                tool="get_order",
                session="s9",
                principal="p9",
                step=1,
                start_ns=T0_NS + DAY,
            )
        ]
        path = write_span_file(tmp_path / "t.json", calls + later)
        con = connect(tmp_path / "db.duckdb")
        try:
            load(con, [path])
            result = export_parquet(con, tmp_path / "out")
        finally:
            con.close()
        assert result.days == ("day=2026-01-01", "day=2026-01-02")
        assert result.spans == span_count(calls + later)
        reader = duckdb.connect()
        try:
            rows = reader.execute(
                "SELECT day, count(*) FROM read_parquet(?, hive_partitioning = true) "
                "GROUP BY day ORDER BY day",
                [str(tmp_path / "out" / "**" / "*.parquet")],
            ).fetchall()
        finally:
            reader.close()
        assert [n for _, n in rows] == [span_count(calls), span_count(later)]

    def test_export_twice_rewrites_not_duplicates(self, db, tmp_path: Path):
        """Exporting again to the same directory leaves one copy of each day."""
        export_parquet(db, tmp_path / "out")
        again = export_parquet(db, tmp_path / "out")
        files = list((tmp_path / "out").rglob("*.parquet"))
        assert len(files) == 1 and again.spans == span_count(dataset())
