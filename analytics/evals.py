"""Evaluation runs in the audit database: ``eval_runs`` (one row a run) and ``eval_cases`` (a case run).

``callgate eval --db FILE`` writes them beside the spans, so the dashboard's Evaluation page can
show metrics per run over time and the cases that changed between two runs. The rows are plain
values from the evaluation's ``--json`` output; nothing here knows the guard.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from .query import Backend, Source, backend_of

__all__ = [
    "EVAL_CASES_TABLE",
    "EVAL_RATES",
    "EVAL_RUNS_TABLE",
    "CaseChange",
    "EvalRun",
    "RateCounts",
    "case_changes",
    "case_rows",
    "ensure_eval_tables",
    "eval_runs",
    "save_eval_run",
]

EVAL_RATES = (
    "precision",
    "recall",
    "abstention_accuracy",
    "argument_validity",
    "argument_correctness",
    "unauthorised_prevention",
)
"""The rates of a run, in the order the page and the CLI show them."""

EVAL_RUNS_TABLE = f"""
CREATE TABLE IF NOT EXISTS eval_runs (
    run_id VARCHAR PRIMARY KEY,
    name VARCHAR NOT NULL,       -- the label given with --name (default: the case file's name)
    started_at TIMESTAMPTZ NOT NULL,
    model VARCHAR,               -- NULL: the observed calls came from the case file
    app VARCHAR NOT NULL,        -- module:factory of the guard that judged
    tools_hash VARCHAR NOT NULL, -- hash of the tool definitions the model saw
    cases INTEGER NOT NULL,
    runs INTEGER NOT NULL,       -- cases x repeats
    passed_runs INTEGER NOT NULL,
    expected_calls INTEGER NOT NULL,
    observed_calls INTEGER NOT NULL,
    correct_calls INTEGER NOT NULL,
    unnecessary_calls INTEGER NOT NULL,
    {", ".join(f"{rate} DOUBLE" for rate in EVAL_RATES)},
    metrics JSON NOT NULL        -- the whole --json output but per_case
)"""

EVAL_CASES_TABLE = """
CREATE TABLE IF NOT EXISTS eval_cases (
    run_id VARCHAR NOT NULL,
    case_id VARCHAR NOT NULL,
    repeat INTEGER NOT NULL,
    passed BOOLEAN NOT NULL,     -- exactly the expected calls and arguments; nothing ran if adversarial
    adversarial BOOLEAN NOT NULL,
    expected_calls INTEGER NOT NULL,
    observed_calls INTEGER NOT NULL,
    correct_calls INTEGER NOT NULL,
    detail JSON NOT NULL,        -- expected and observed calls with their verdicts
    PRIMARY KEY (run_id, case_id, repeat)
)"""


def ensure_eval_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the two tables if this database has none yet."""
    con.execute(EVAL_RUNS_TABLE)
    con.execute(EVAL_CASES_TABLE)


def save_eval_run(
    con: duckdb.DuckDBPyConnection,
    *,
    run_id: str,
    name: str,
    started_at: datetime,
    model: str | None,
    app: str,
    tools_hash: str,
    result: Mapping[str, Any],
) -> None:
    """Store one run (``result`` is the evaluation's ``--json`` object) in one transaction."""
    ensure_eval_tables(con)
    summary = {key: value for key, value in result.items() if key != "per_case"}
    rates = [(result[rate] or {}).get("value") for rate in EVAL_RATES]
    con.execute("BEGIN")
    try:
        con.execute(
            f"INSERT INTO eval_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            f"{', '.join('?' for _ in EVAL_RATES)}, ?)",
            [
                run_id,
                name,
                started_at,
                model,
                app,
                tools_hash,
                result["cases"],
                result["runs"],
                result["passed_runs"],
                result["expected_calls"],
                result["observed_calls"],
                result["correct_calls"],
                result["unnecessary_calls"],
                *rates,
                json.dumps(summary),
            ],
        )
        con.executemany(
            "INSERT INTO eval_cases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                [
                    run_id,
                    case["id"],
                    case["repeat"],
                    case["passed"],
                    case["adversarial"],
                    case["expected_calls"],
                    case["observed_calls"],
                    case["correct_calls"],
                    json.dumps({k: case[k] for k in ("expected", "observed", "tags", "error")}),
                ]
                for case in result["per_case"]
            ],
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


@dataclass(frozen=True, kw_only=True, slots=True)
class EvalRun:
    """One stored run, newest last in :func:`eval_runs`."""

    run_id: str
    name: str
    started_at: datetime
    model: str | None
    tools_hash: str
    cases: int
    runs: int
    passed_runs: int
    rates: dict[str, float | None]
    counts: dict[str, RateCounts] = field(default_factory=dict)
    """Per rate, what it counted and its 95% Wilson interval (absent for a rate with nothing)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RateCounts:
    """A rate's numerator and denominator and its 95% interval, as `callgate eval` computed them."""

    numerator: int
    denominator: int
    low: float | None
    high: float | None


def _counts(metrics: object) -> dict[str, RateCounts]:
    """The rates' counts from a run's stored ``metrics`` JSON (a string on DuckDB)."""
    try:
        found = json.loads(metrics) if isinstance(metrics, str) else metrics
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    out: dict[str, RateCounts] = {}
    for rate in EVAL_RATES:
        item = found.get(rate)
        if (
            isinstance(item, dict)
            and isinstance(item.get("denominator"), int)
            and item["denominator"]
        ):
            out[rate] = RateCounts(
                numerator=int(item.get("numerator") or 0),
                denominator=int(item["denominator"]),
                low=item.get("low"),
                high=item.get("high"),
            )
    return out


def eval_runs(source: Source, *, limit: int = 200) -> list[EvalRun]:
    """The stored runs in the order they started (at most the newest ``limit``); [] without tables."""
    b = backend_of(source)
    d = b.dialect
    if not _has_evals(b):
        return []
    rows = b.fetch(
        f"""SELECT * FROM (
                SELECT run_id, name, started_at, model, tools_hash, cases, runs, passed_runs,
                       {", ".join(EVAL_RATES)}, metrics
                FROM {d.eval_runs} ORDER BY started_at DESC, run_id DESC
                LIMIT {d.param("limit", "int")}
            ) AS newest ORDER BY started_at, run_id""",
        {"limit": limit},
    )
    return [
        EvalRun(
            run_id=row["run_id"],
            name=row["name"],
            started_at=row["started_at"],
            model=row["model"],
            tools_hash=row["tools_hash"],
            cases=row["cases"],
            runs=row["runs"],
            passed_runs=row["passed_runs"],
            rates={rate: row[rate] for rate in EVAL_RATES},
            counts=_counts(row.get("metrics")),
        )
        for row in rows
    ]


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseChange:
    """A case whose pass rate differs between two runs (None: the case is not in that run)."""

    case_id: str
    before: float | None
    after: float | None


def case_changes(source: Source, before: str, after: str) -> list[CaseChange]:
    """Cases whose share of passing repeats changed from run ``before`` to run ``after``.

    Each run's cases are first reduced to a pass rate (passing repeats / repeats); a full outer
    join on the case id then keeps the cases whose rates differ, including cases only one run has.
    """
    b = backend_of(source)
    d = b.dialect
    if not _has_evals(b):
        return []
    run_before, run_after = d.param("before", "string"), d.param("after", "string")
    rows = b.fetch(
        f"""
        WITH rate AS (
            SELECT run_id, case_id, avg(CAST(passed AS INTEGER)) AS passed
            FROM {d.eval_cases} WHERE run_id IN ({run_before}, {run_after})
            GROUP BY run_id, case_id
        ), a AS (SELECT * FROM rate WHERE run_id = {run_before}),
           b AS (SELECT * FROM rate WHERE run_id = {run_after})
        SELECT coalesce(a.case_id, b.case_id) AS case_id, a.passed AS before, b.passed AS after
        FROM a FULL OUTER JOIN b ON a.case_id = b.case_id
        WHERE a.passed IS DISTINCT FROM b.passed
        ORDER BY case_id
        """,
        {"before": before, "after": after},
    )
    return [CaseChange(case_id=r["case_id"], before=r["before"], after=r["after"]) for r in rows]


def case_rows(source: Source, run_id: str) -> Sequence[dict[str, Any]]:
    """Every case run of ``run_id`` with its verdict detail, by case id and repeat."""
    b = backend_of(source)
    d = b.dialect
    if not _has_evals(b):
        return []
    rows = b.fetch(
        f"SELECT case_id, repeat, passed, adversarial, detail FROM {d.eval_cases} "
        f"WHERE run_id = {d.param('run', 'string')} ORDER BY case_id, repeat",
        {"run": run_id},
    )
    return [
        {key: row[key] for key in ("case_id", "repeat", "passed", "adversarial")}
        | json.loads(row["detail"])
        for row in rows
    ]


def _has_evals(backend: Backend) -> bool:
    """True when the backend's engine keeps evaluation runs and this database holds some.

    Evaluation runs live in the DuckDB file ``callgate eval --db`` wrote; a ClickHouse deployment
    keeps its spans there and its evaluations in such a file (its dialect has no eval tables).
    """
    table = backend.dialect.eval_runs
    if table is None:
        return False
    found = backend.fetch(
        "SELECT count(*) AS n FROM information_schema.tables "
        f"WHERE table_name = {backend.dialect.param('table', 'string')}",
        {"table": table},
    )
    return bool(found and found[0]["n"])
