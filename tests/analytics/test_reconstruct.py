"""Incident reconstruction by trace id, session and call id."""

from __future__ import annotations

from analytics.reconstruct import (
    calls_by_call_id,
    calls_with_code,
    session_calls,
    to_jsonable,
    trace,
)

RESUMED_TRACE = "0205".ljust(32, "a")
REQUEST_TRACE = "0203".ljust(32, "a")


class TestTrace:
    def test_span_tree_with_stages_in_order(self, db):
        """The call span is the root; its stages follow in pipeline order with outcome and code."""
        view = trace(db, RESUMED_TRACE)
        assert view is not None
        (root,) = view.roots
        assert root.name == "execute_tool refund_order"
        assert [c.stage for c in root.children] == [
            "budget",
            "resolve",
            "parse",
            "schema",
            "idempotency",
            "rules",
            "policy",
            "confirm",
            "execute",
        ]
        assert root.children[-1].stage_outcome == "final"
        assert root.children[-1].duration_ms == 60.0

    def test_retries_and_arguments(self, db):
        """Retry events on the execute stage and the masked arguments are part of the rebuild."""
        view = trace(db, RESUMED_TRACE)
        assert view is not None
        execute = view.roots[0].children[-1]
        assert [e.attributes["guard.retry.attempt"] for e in execute.events] == [1, 2]
        assert "amount_cents" in str(view.roots[0].attributes["guard.arguments"])
        (call,) = view.calls
        assert (call.attempts, call.resumed, call.confirmed) == (3, True, True)

    def test_approval_history_spans_traces(self, db):
        """The request and the resumption share an approval id across two traces."""
        view = trace(db, RESUMED_TRACE)
        assert view is not None
        assert [(c.trace_id, c.approval_outcome) for c in view.approvals] == [
            (REQUEST_TRACE, "pending"),
            (RESUMED_TRACE, "approved"),
        ]

    def test_rejected_call_stops_at_its_stage(self, db):
        """A schema rejection shows four stages, the last one rejecting with the code."""
        view = trace(db, "0101".ljust(32, "a"))
        assert view is not None
        stages = view.roots[0].children
        assert [s.stage for s in stages] == ["budget", "resolve", "parse", "schema"]
        assert (stages[-1].stage_outcome, stages[-1].code) == ("reject", "INVALID_ARGUMENTS")
        assert stages[-1].status_code == 2

    def test_every_attribute_is_shown(self, db):
        """The call span's attributes come back typed, from the contract columns."""
        view = trace(db, RESUMED_TRACE)
        assert view is not None
        attributes = view.roots[0].attributes
        assert attributes["gen_ai.tool.name"] == "refund_order"
        assert attributes["guard.ok"] is True and attributes["guard.step"] == 5
        assert attributes["guard.approval.id"] == "apr_1"
        assert view.roots[0].children[0].attributes == {
            "guard.stage.name": "budget",
            "guard.stage.outcome": "pass",
        }

    def test_unknown_trace_is_none(self, db):
        """A trace id with no spans gives None."""
        assert trace(db, "f" * 32) is None

    def test_jsonable(self, db):
        """The rebuild converts to plain JSON data."""
        data = to_jsonable(trace(db, RESUMED_TRACE))
        assert data["trace_id"] == RESUMED_TRACE
        assert data["roots"][0]["start_time"].endswith("Z")


class TestSessionAndCallId:
    def test_session_in_order(self, db):
        """A session's calls come back in step order."""
        calls = session_calls(db, "s3")
        assert [c.step for c in calls] == list(range(1, 10))
        assert calls[0].code == "TAINTED_CONTEXT"

    def test_call_id(self, db):
        """A call is found by the model's call id."""
        (call,) = calls_by_call_id(db, "call_s1_3")
        assert (call.tool, call.code, call.session) == ("refund_order", "NOT_FOUND", "s1")

    def test_calls_with_code(self, db):
        """Calls that ended with a code, oldest first, up to a limit."""
        calls = calls_with_code(db, "CONFIRMATION_REQUIRED", limit=2)
        assert [c.call_id for c in calls] == ["call_s2_3", "call_s3_2"]


class TestThroughTheBackend:
    def test_duckdb_backend_rebuilds_the_same_trace(self, db):
        """A DuckDBBackend reads the same tree as the bare connection (no engine type check)."""
        from analytics.query import DuckDBBackend

        assert trace(DuckDBBackend(db), RESUMED_TRACE) == trace(db, RESUMED_TRACE)
        assert session_calls(DuckDBBackend(db), "s2") == session_calls(db, "s2")
