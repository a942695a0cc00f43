"""analytics.taint: the call whose untrusted result tainted a session."""

from __future__ import annotations

from datetime import timedelta

import duckdb

from analytics import reconstruct, taint
from analytics.load import load
from analytics.synth import Call, write_span_file

from .conftest import MINUTE, T0, T0_NS


class TestTaintedBy:
    def test_none_without_untrusted_results(self, db: duckdb.DuckDBPyConnection) -> None:
        """s3's TAINTED_CONTEXT has no stored untrusted read before it."""
        assert taint.tainted_by(db, "s3", before=T0 + timedelta(days=1)) is None

    def test_first_untrusted_call_before_the_write(
        self, db: duckdb.DuckDBPyConnection, tmp_path
    ) -> None:
        """The first untrusted read at or before the time, with its flags, and how many there were."""
        flags = {"guard.untrusted": True, "guard.injection.detected": True}
        calls = [
            Call(trace_id=f"{n:032x}", span_id=f"{n:016x}", tool=tool, session="t1",
                 principal="p", step=n, start_ns=T0_NS + n * MINUTE, code=code, extra=extra)
            for n, tool, code, extra in [
                (1, "get_order", "OK", {}),
                (2, "search_refund_policy", "OK",
                 {**flags, "guard.injection.rule": "ignore_instructions",
                  "guard.message": "search_refund_policy succeeded."}),
                (3, "search_refund_policy", "OK", {"guard.untrusted": True}),
                (4, "refund_order", "TAINTED_CONTEXT", {}),
                (5, "search_refund_policy", "OK", {"guard.untrusted": True}),
            ]
        ]  # fmt: skip
        load(db, [write_span_file(tmp_path / "t.jsonl", calls)])
        held = next(c for c in reconstruct.session_calls(db, "t1") if c.step == 4)
        found = taint.tainted_by(db, "t1", before=held.start_time)
        assert found is not None
        assert (found.step, found.tool, found.injection_rule) == (
            2,
            "search_refund_policy",
            "ignore_instructions",
        )
        assert found.injection_detected is True and found.untrusted_calls == 2
        assert found.message == "search_refund_policy succeeded."
