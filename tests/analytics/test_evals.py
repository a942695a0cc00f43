"""Stored evaluation runs read the same through a DuckDB connection and any Backend over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from analytics.clickhouse import ChdbBackend
from analytics.evals import case_changes, case_rows, eval_runs
from analytics.query import DuckDBBackend
from callgate.cli import main
from tests.evaluation.cases import WORKED, write


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[duckdb.DuckDBPyConnection]:
    """Two runs of `callgate eval --db`, the second with one case fixed."""
    tmp = tmp_path_factory.mktemp("evals")
    db = tmp / "calls.duckdb"
    fixed = [c | {"observed": c["expected"]} if c["id"] == "units" else c for c in WORKED]
    for name, cases in (("v1", WORKED), ("v2", fixed)):
        done = CliRunner().invoke(
            main,
            ["eval", str(write(tmp / f"{name}.jsonl", cases)), "--db", str(db), "--name", name],
        )
        assert done.exit_code in (0, 1), done.output  # 1: below 100%, still stored
    with duckdb.connect(str(db), read_only=True) as con:
        yield con


class TestThroughTheBackend:
    """`eval_runs`, `case_changes` and `case_rows` take any Source, as every metric does."""

    def test_runs_through_a_backend_equal_runs_through_the_connection(
        self, database: duckdb.DuckDBPyConnection
    ) -> None:
        """`eval_runs(DuckDBBackend(con))` returns the stored runs, the same as `eval_runs(con)`."""
        direct = eval_runs(database)
        assert [run.name for run in direct] == ["v1", "v2"]
        assert eval_runs(DuckDBBackend(database)) == direct
        assert direct[0].rates["argument_validity"] == pytest.approx(5 / 7)

    def test_changes_and_rows_through_a_backend(self, database: duckdb.DuckDBPyConnection) -> None:
        """The changed case and every case row come back the same through either source."""
        first, second = (run.run_id for run in eval_runs(database))
        backend = DuckDBBackend(database)
        [change] = case_changes(backend, first, second)
        assert (change.case_id, change.before, change.after) == ("units", 0.0, 1.0)
        assert case_changes(database, first, second) == [change]
        rows = case_rows(backend, second)
        assert rows == list(case_rows(database, second))
        assert {row["case_id"] for row in rows} == {case["id"] for case in WORKED}
        assert all("expected" in row and "observed" in row for row in rows)

    def test_limit_keeps_the_newest(self, database: duckdb.DuckDBPyConnection) -> None:
        """`limit=1` keeps the run that started last."""
        assert [run.name for run in eval_runs(DuckDBBackend(database), limit=1)] == ["v2"]

    def test_a_database_without_runs_has_none(self, tmp_path: Path) -> None:
        """A database `callgate eval` never wrote to lists no runs, no changes, no rows."""
        with duckdb.connect(str(tmp_path / "empty.duckdb")) as con:
            backend = DuckDBBackend(con)
            assert eval_runs(backend) == [] and case_rows(backend, "x") == []
            assert case_changes(backend, "a", "b") == []

    def test_clickhouse_keeps_no_runs(self, tmp_path: Path) -> None:
        """On ClickHouse (a real chdb session) the dialect has no eval tables: no runs, no error."""
        from chdb import session as chdb_session

        session = chdb_session.Session(str(tmp_path / "chdb"))
        try:
            assert eval_runs(ChdbBackend(session)) == []
        finally:
            session.close()
