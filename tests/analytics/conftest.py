"""A small, hand-computed dataset in the span contract's encoding, and databases loaded from it.

Three sessions, 21 calls, one minute apart, each session one hour after the previous one:

s1 (p1, svc-a): get_order INVALID_ARGUMENTS [/order_id], get_order OK, refund_order NOT_FOUND,
    get_order OK x3, refund_order OK
s2 (p2, svc-b): refund_order INVALID_ARGUMENTS [/amount_cents,/currency], INVALID_ARGUMENTS
    [/amount_cents], CONFIRMATION_REQUIRED (apr_1), LOOP_DETECTED, resumed apr_1 approved -> OK
s3 (p1, svc-a): TAINTED_CONTEXT (apr_2), CONFIRMATION_REQUIRED (apr_3), CONFIRMATION_REQUIRED
    (apr_4), resumed apr_2 denied, resumed apr_3 approved -> AMOUNT_EXCEEDS_REFUNDABLE, OK
    replayed, get_order STEP_LIMIT, CONFIRMATION_REQUIRED (apr_6), resumed apr_6 expired

Every stage takes 1 ms except ``execute`` of the seven OK calls: 10, 20, ..., 70 ms.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics.load import connect, load
from analytics.synth import STAGES, Call, write_span_file

T0 = datetime(2026, 1, 1)
T0_NS = 1_767_225_600_000_000_000
MINUTE = 60 * 1_000_000_000
HOUR = 60 * MINUTE
MS = 1_000_000

_SESSIONS: list[tuple[str, str, str, list[dict[str, Any]]]] = [
    (
        "s1",
        "p1",
        "svc-a",
        [
            {"tool": "get_order", "code": "INVALID_ARGUMENTS", "invalid_fields": ["/order_id"]},
            {"tool": "get_order", "exec_ms": 10},
            {"tool": "refund_order", "code": "NOT_FOUND"},
            {"tool": "get_order", "exec_ms": 20},
            {"tool": "get_order", "exec_ms": 30},
            {"tool": "get_order", "exec_ms": 40},
            {"tool": "refund_order", "exec_ms": 50},
        ],
    ),
    (
        "s2",
        "p2",
        "svc-b",
        [
            {"code": "INVALID_ARGUMENTS", "invalid_fields": ["/amount_cents", "/currency"]},
            {"code": "INVALID_ARGUMENTS", "invalid_fields": ["/amount_cents"]},
            {
                "code": "CONFIRMATION_REQUIRED",
                "approval_id": "apr_1",
                "approval_outcome": "pending",
            },
            {"code": "LOOP_DETECTED"},
            {
                "exec_ms": 60,
                "approval_id": "apr_1",
                "approval_outcome": "approved",
                "resumed": True,
                "confirmed": True,
                "attempts": 3,
                "retries": ["ConnectionError", "ConnectionError"],
            },
        ],
    ),
    (
        "s3",
        "p1",
        "svc-a",
        [
            {"code": "TAINTED_CONTEXT", "approval_id": "apr_2", "approval_outcome": "pending"},
            {
                "code": "CONFIRMATION_REQUIRED",
                "approval_id": "apr_3",
                "approval_outcome": "pending",
            },
            {
                "code": "CONFIRMATION_REQUIRED",
                "approval_id": "apr_4",
                "approval_outcome": "pending",
            },
            {
                "code": "CONFIRMATION_DENIED",
                "approval_id": "apr_2",
                "approval_outcome": "denied",
                "resumed": True,
            },
            {
                "code": "AMOUNT_EXCEEDS_REFUNDABLE",
                "approval_id": "apr_3",
                "approval_outcome": "approved",
                "resumed": True,
            },
            {"exec_ms": 70, "replayed": True},
            {"tool": "get_order", "code": "STEP_LIMIT"},
            {
                "code": "CONFIRMATION_REQUIRED",
                "approval_id": "apr_6",
                "approval_outcome": "pending",
            },
            {
                "code": "CONFIRMATION_EXPIRED",
                "approval_id": "apr_6",
                "approval_outcome": "expired",
                "resumed": True,
            },
        ],
    ),
]


_ARGUMENTS = {
    "get_order": '{"order_id":"ORD-1001"}',
    "refund_order": '{"order_id":"ORD-1001","amount_cents":2590,"currency":"BRL"}',
}


def dataset() -> list[Call]:
    """The 21 calls described in the module docstring."""
    calls = []
    for n, (session, principal, service, specs) in enumerate(_SESSIONS):
        for step, spec in enumerate(specs, start=1):
            spec = dict(spec)
            tool = spec.pop("tool", "refund_order")
            code = spec.pop("code", "OK")
            exec_ms = spec.pop("exec_ms", None)
            base = Call(
                trace_id="0" * 32,
                span_id="0" * 16,
                tool=tool,
                session=session,
                principal=principal,
                step=step,
                code=code,
                start_ns=0,
            )
            durations = [MS] * len(base.stages)
            if exec_ms is not None:
                durations[-1] = exec_ms * MS
            calls.append(
                Call(
                    trace_id=f"{n + 1:02x}{step:02x}".ljust(32, "a"),
                    span_id=f"{n + 1:02x}{step:02x}".ljust(16, "b"),
                    tool=tool,
                    session=session,
                    principal=principal,
                    service=service,
                    step=step,
                    code=code,
                    start_ns=T0_NS + n * HOUR + (step - 1) * MINUTE,
                    stage_ns=durations,
                    call_id=f"call_{session}_{step}",
                    arguments=_ARGUMENTS[tool],
                    **spec,
                )
            )
    return calls


def span_count(calls: list[Call]) -> int:
    """Spans the calls make: the call span plus one per stage that ran."""
    return sum(len(c.stages) + 1 for c in calls)


assert len(STAGES) == 9


@pytest.fixture
def span_file(tmp_path: Path) -> Path:
    """The dataset as one OTLP JSON lines file, 64 spans a line."""
    return write_span_file(tmp_path / "traces.json", dataset(), batch=64)


@pytest.fixture
def db(tmp_path: Path, span_file: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A database with the dataset loaded."""
    con = connect(tmp_path / "callgate.duckdb")
    load(con, [span_file])
    try:
        yield con
    finally:
        con.close()
