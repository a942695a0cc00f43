"""The ``guard.outcome.settled`` span of a status check that settled an unknown outcome."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, ConfigDict

from guard import Effect, Guard, Outcome, Policy, Principal, RolePolicy, ToolContext, tool
from telemetry import configure
from telemetry.masking import Masker

from .conftest import KEY, read_spans

ARGS = json.dumps({"account": "A1", "amount_cents": 500})
PRINCIPAL = Principal(id="u1", role="agent", scopes=frozenset())


class Pay(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    amount_cents: int


@dataclass
class Backend:
    """Does not deduplicate; ``fail`` loses the answer after the effect, or before it."""

    fail: str
    applied: list[str] = field(default_factory=list)

    def pay(self, key: str) -> dict[str, Any]:
        if self.fail == "before":
            raise TimeoutError("no answer")
        self.applied.append(key)
        if self.fail == "after":
            raise TimeoutError("answer lost")
        return {"receipt": len(self.applied)}


def otlp_ids(exporter: InMemorySpanExporter) -> set[tuple[str, str, str]]:
    out = set()
    for span in exporter.get_finished_spans():
        assert span.context is not None
        parent = format(span.parent.span_id, "016x") if span.parent is not None else ""
        out.add((format(span.context.span_id, "016x"), parent, span.name))
    return out


class TestStatusCheckSpan:
    @pytest.mark.parametrize(("fail", "outcome"), [("after", "applied"), ("before", "not_applied")])
    def test_the_repeat_that_settles_carries_the_settlement_span(
        self, fail: str, outcome: str
    ) -> None:
        """A TIMEOUT, then a repeat whose status check settles it: that repeat's trace has a
        guard.outcome.settled child of its call span (source and by status_check, the settled
        outcome, the key as the call span hashes it), in the trail and over OTLP with the same
        ids; the first call has none; the trail's span count is what is on disk."""
        backend = Backend(fail=fail)

        def check(args: Pay, ctx: ToolContext) -> Outcome:
            assert ctx.idempotency_key is not None
            applied = ctx.idempotency_key in backend.applied
            return Outcome.APPLIED if applied else Outcome.NOT_APPLIED

        @tool(arguments=Pay, effect=Effect.WRITE, idempotent_backend=False, timeout=1.0,
              reconcile=check)  # fmt: skip
        def pay(args: Pay, ctx: ToolContext) -> dict[str, Any]:
            """Pay from an account."""
            assert ctx.idempotency_key is not None
            return backend.pay(ctx.idempotency_key)

        exporter = InMemorySpanExporter()
        with tempfile.TemporaryDirectory() as directory:
            handle = configure(
                trail_dir=directory, otlp=True, span_exporter=exporter, masking_key=KEY
            )
            policy = Policy(roles={"agent": RolePolicy(tools=frozenset({"pay"}))})
            guard = Guard(tools=[pay], policy=policy, observer=handle.observer)
            session = guard.session("s1", PRINCIPAL)
            first = session.execute("pay", ARGS)
            second = session.execute("pay", ARGS)
            handle.shutdown()
            spans = read_spans(Path(directory))
            assert handle.trail is not None and handle.trail.spans == len(spans)
        assert (first.outcome, str(second.outcome)) == (Outcome.UNKNOWN, outcome)
        calls = [s for s in spans if s["name"] == "execute_tool pay"]
        (settled,) = [s for s in spans if s["name"] == "guard.outcome.settled"]
        assert settled["parentSpanId"] == calls[1]["spanId"]
        assert settled["traceId"] == calls[1]["traceId"] != calls[0]["traceId"]
        assert second.idempotency_key is not None
        assert settled["attrs"] == {
            "guard.settled.source": "status_check",
            "guard.settled.by": "status_check",
            "guard.outcome": outcome,
            "guard.idempotency_key": Masker(key=KEY).short_hash(second.idempotency_key),
            "gen_ai.tool.name": "pay",
        }
        assert (
            settled["attrs"]["guard.idempotency_key"] == calls[1]["attrs"]["guard.idempotency_key"]
        )
        trail = {(s["spanId"], s.get("parentSpanId", ""), s["name"]) for s in spans}
        assert trail == otlp_ids(exporter)
        assert len(backend.applied) == (1 if fail == "after" else 0)
