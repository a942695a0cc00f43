"""Evaluation: the metrics of each stored `callgate eval` run over time, and what changed between two."""

from __future__ import annotations

import streamlit as st

from analytics.evals import EVAL_RATES, case_changes, case_rows, eval_runs

from .. import charts, fmt, safe
from .base import Page, PageContext

__all__ = ["PAGE"]

_LABELS = {
    "precision": "precision",
    "recall": "recall",
    "abstention_accuracy": "abstention",
    "argument_validity": "valid arguments",
    "argument_correctness": "right arguments",
    "unauthorised_prevention": "attacks stopped",
}


def render(ctx: PageContext) -> None:
    """Rates per run over time, the newest run's numbers, and the cases that changed between two runs."""
    st.header("Evaluation")
    runs = eval_runs(ctx.source)
    if not runs:
        st.info(
            "No evaluation runs in this database yet. Store one with "
            "`callgate eval CASES.jsonl --db FILE`; each run is labelled with its name, "
            "model and a hash of the tool definitions."
        )
        return
    newest = runs[-1]
    columns = st.columns(len(EVAL_RATES))
    for column, rate in zip(columns, EVAL_RATES, strict=True):
        counted = newest.counts.get(rate)
        column.metric(_LABELS[rate], fmt.rate(newest.rates[rate]), border=True)
        if counted is None:
            column.caption("nothing to count")
            continue
        interval = (
            f" · 95% CI {fmt.rate(counted.low)} to {fmt.rate(counted.high)}"
            if counted.low is not None and counted.high is not None
            else ""
        )
        column.caption(f"{counted.numerator:,} of {counted.denominator:,}{interval}")
    # names, models and hashes come from the database: shown as text, never as Markdown
    st.caption(
        f"Newest run: {safe.text(newest.name)} ({safe.text(newest.run_id)}), "
        f"{fmt.when(newest.started_at)}, model {safe.text(newest.model or 'none (observed calls)')}, "
        f"tools {safe.text(newest.tools_hash)}, {newest.passed_runs} of {newest.runs} case runs "
        "as expected."
    )
    st.subheader("Per run")
    labels = [f"{run.name} · {run.run_id[:6]}" for run in runs]
    st.altair_chart(
        charts.run_lines(
            [
                {"run": label, "metric": _LABELS[rate], "value": run.rates[rate]}
                for label, run in zip(labels, runs, strict=True)
                for rate in EVAL_RATES
                if run.rates[rate] is not None
            ],
            x="run",
            y="value",
            color="metric",
            runs=labels,
            order=[_LABELS[r] for r in EVAL_RATES],
        ),
        width="stretch",
    )
    st.dataframe(
        [
            {
                "run": run.run_id,
                "name": run.name,
                "started (UTC)": fmt.when(run.started_at),
                "model": run.model or "observed",
                "tools": run.tools_hash,
                "as expected": f"{run.passed_runs}/{run.runs}",
            }
            | {_LABELS[rate]: fmt.rate(run.rates[rate]) for rate in EVAL_RATES}
            for run in reversed(runs)
        ],
        hide_index=True,
    )
    _changes(
        ctx, [run.run_id for run in runs], dict(zip([r.run_id for r in runs], labels, strict=True))
    )


def _changes(ctx: PageContext, run_ids: list[str], labels: dict[str, str]) -> None:
    st.subheader("Cases that changed between two runs")
    if len(run_ids) < 2:
        st.caption("Store a second run to compare.")
        return
    left, right = st.columns(2)
    before = left.selectbox(
        "Before", run_ids, index=len(run_ids) - 2, key="eval_before", format_func=labels.__getitem__
    )
    after = right.selectbox(
        "After", run_ids, index=len(run_ids) - 1, key="eval_after", format_func=labels.__getitem__
    )
    changes = case_changes(ctx.source, str(before), str(after))
    if not changes:
        st.caption("Every case has the same outcome in both runs.")
        return
    detail = {row["case_id"]: row for row in case_rows(ctx.source, str(after))}
    st.dataframe(
        [
            {
                "case": change.case_id,
                "before (share as expected)": fmt.rate(change.before),
                "after": fmt.rate(change.after),
                "observed after": ", ".join(
                    f"{o['name']} ({o['code']})"
                    for o in detail.get(change.case_id, {}).get("observed", [])
                )
                or "no call",
            }
            for change in changes
        ],
        hide_index=True,
    )


PAGE = Page(slug="evaluation", title="Evaluation", render=render)
