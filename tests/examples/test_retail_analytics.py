"""The retail trail in DuckDB: domain codes in the metrics, warnings, shadow apart, recovery by fixable."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from analytics import (
    connect,
    recovery_rate,
    rejection_rate,
    warning_counts,
    would_have_rejected,
)
from analytics.load import load

SPANS = tuple[Path, dict[str, int]]


@pytest.fixture
def con(retail_trail: SPANS, tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = connect(tmp_path / "retail.duckdb")
    load(connection, sorted(retail_trail[0].glob("*.jsonl")))
    yield connection
    connection.close()


class TestRetailMetrics:
    """Every metric treats the domain's codes like core codes, and shadow calls apart."""

    def test_domain_codes_are_rejections_by_code(self, con: duckdb.DuckDBPyConnection) -> None:
        """VARIANT_MISMATCH, AUTH_REQUIRED and PAYMENT_METHOD_UNUSABLE each count once (not the shadow one)."""
        rows = {(r.tool, r.code): r.rejected for r in rejection_rate(con, by="tool_code")}
        assert rows[("exchange_delivered_order_items", "VARIANT_MISMATCH")] == 1
        assert rows[("get_order_details", "AUTH_REQUIRED")] == 1
        assert rows[("return_delivered_order_items", "PAYMENT_METHOD_UNUSABLE")] == 1

    def test_warnings_per_tool_and_code(self, con: duckdb.DuckDBPyConnection) -> None:
        """One SAME_ITEM warning on the exchange tool, over its exchange calls."""
        (row,) = warning_counts(con)
        assert (row.tool, row.code, row.warnings) == (
            "exchange_delivered_order_items",
            "SAME_ITEM",
            1,
        )
        assert row.calls == 3 and row.share == pytest.approx(1 / 3)

    def test_would_have_rejected_per_tool_and_code(self, con: duckdb.DuckDBPyConnection) -> None:
        """The shadow guard's one would-be refusal, with its stage and fixable flag."""
        (row,) = would_have_rejected(con)
        assert (row.tool, row.code, row.stage, row.fixable) == (
            "exchange_delivered_order_items",
            "VARIANT_MISMATCH",
            "rules",
            True,
        )
        assert row.would_have_rejected == 1 and row.shadow_calls == 1

    def test_recovery_counts_what_the_span_says_is_fixable(
        self, con: duckdb.DuckDBPyConnection
    ) -> None:
        """The closed-account refusal (not fixable for Omar) is outside recovery's denominator."""
        rows = {r.tool: r.rejected for r in recovery_rate(con)}
        assert "return_delivered_order_items" not in rows
        assert rows["exchange_delivered_order_items"] == 1 and rows["get_order_details"] == 1


class TestReport:
    """callgate report shows the domain's codes, its warnings and the shadow decisions."""

    def test_report_has_the_new_sections(self, retail_trail: SPANS, tmp_path: Path) -> None:
        """JSON report: warnings and would-have-rejected rows, domain codes by code."""
        import json

        from click.testing import CliRunner

        from callgate.cli import main

        db = tmp_path / "r.duckdb"
        files = [str(p) for p in sorted(retail_trail[0].glob("*.jsonl"))]
        assert CliRunner().invoke(main, ["load", *files, "--db", str(db)]).exit_code == 0
        output = CliRunner().invoke(main, ["report", "--db", str(db), "--json", "--min-calls", "1"])
        assert output.exit_code == 0, output.output
        report = json.loads(output.output)
        assert report["warnings"][0]["code"] == "SAME_ITEM"
        assert report["would_have_rejected_in_shadow"][0]["code"] == "VARIANT_MISMATCH"
        codes = {row["code"] for row in report["rejection_rate_by_code"]}
        assert {"VARIANT_MISMATCH", "AUTH_REQUIRED", "PAYMENT_METHOD_UNUSABLE"} <= codes
        table = CliRunner().invoke(main, ["report", "--db", str(db), "--min-calls", "1"])
        assert "would have rejected in shadow" in table.output and "SAME_ITEM" in table.output
