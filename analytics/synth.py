"""Synthetic span files in the span contract's encoding, for tests, the benchmark and demos.

Lines are OTLP JSON ``ExportTraceServiceRequest`` objects exactly as the OpenTelemetry Collector's
file exporter writes them (hex ids, nanosecond times as strings, ``intValue`` as strings, enums as
numbers, empty fields omitted). :class:`SpanFileWriter` turns :class:`Call` values into those lines;
:func:`generate` draws a deterministic, realistic mix of sessions and calls from a seed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from telemetry import attributes as A

__all__ = ["STAGES", "Call", "SpanFileWriter", "encode_request", "generate", "write_span_file"]

STAGES: tuple[str, ...] = A.STAGES
"""The pipeline's stages in order (the ``guard.<stage>`` child spans)."""

_STAGE_OF_CODE: dict[str, str] = {
    "STEP_LIMIT": "budget",
    "RATE_LIMITED": "budget",
    "VALIDATION_BUDGET_EXHAUSTED": "budget",
    "UNKNOWN_TOOL": "resolve",
    "TOOL_NOT_ALLOWED": "resolve",
    "PERMISSION_DENIED": "resolve",
    "INVALID_JSON": "parse",
    "INVALID_ARGUMENTS": "schema",
    "LOOP_DETECTED": "idempotency",
    "IN_PROGRESS": "idempotency",
    "IDEMPOTENCY_CONFLICT": "idempotency",
    "NOT_FOUND": "rules",
    "PREREQUISITE_MISSING": "rules",
    "CURRENCY_MISMATCH": "rules",
    "AMOUNT_EXCEEDS_REFUNDABLE": "rules",
    "INVALID_STATE": "rules",
    "POLICY_LIMIT": "policy",
    "TAINTED_CONTEXT": "confirm",
    "CONFIRMATION_REQUIRED": "confirm",
    "CONFIRMATION_DENIED": "confirm",
    "CONFIRMATION_EXPIRED": "confirm",
    "UPSTREAM_UNAVAILABLE": "execute",
    "TIMEOUT": "execute",
    "UPSTREAM_REJECTED": "execute",
    "INTERNAL_ERROR": "execute",
}
_FIXABLE = frozenset(
    {
        "UNKNOWN_TOOL",
        "INVALID_JSON",
        "INVALID_ARGUMENTS",
        "NOT_FOUND",
        "PREREQUISITE_MISSING",
        "CURRENCY_MISMATCH",
        "AMOUNT_EXCEEDS_REFUNDABLE",
    }
)
_WRITES = frozenset({"refund_order"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One tool call as the span contract records it: the call span plus one span per stage."""

    trace_id: str
    """32 hex digits."""
    span_id: str
    """16 hex digits; stage spans derive their ids from it."""
    tool: str
    session: str
    principal: str
    step: int
    code: str = "OK"
    start_ns: int
    """Start of the call, Unix nanoseconds."""
    stage_ns: Sequence[int] = ()
    """Duration of each stage that ran, in pipeline order; empty for the default 1 ms each."""
    service: str = "callgate"
    call_id: str = ""
    role: str = "customer"
    turn: int = 1
    replayed: bool = False
    confirmed: bool = False
    resumed: bool = False
    approval_id: str = ""
    approval_outcome: str = ""
    attempts: int | None = None
    invalid_fields: Sequence[str] = ()
    arguments: str = "{}"
    retries: Sequence[str] = ()
    """Errors of the failed handler attempts before the last one (retry events)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """More call-span attributes, name -> Python value."""

    @property
    def ok(self) -> bool:
        """The call succeeded."""
        return self.code == "OK"

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages that ran: up to the rejecting one, or all of them."""
        last = "execute" if self.ok else _STAGE_OF_CODE.get(self.code, "execute")
        return STAGES[: STAGES.index(last) + 1]


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _attrs(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in pairs.items() if v is not None and v != ""]


def _stage_span_id(call: Call, index: int) -> str:
    return f"{int(call.span_id, 16) ^ ((index + 1) << 56):016x}"


def _call_attributes(call: Call) -> dict[str, Any]:
    effect = "write" if call.tool in _WRITES else "read"
    attrs: dict[str, Any] = {
        A.GEN_AI_OPERATION_NAME: A.OPERATION_EXECUTE_TOOL,
        A.GEN_AI_TOOL_NAME: call.tool,
        A.GEN_AI_TOOL_CALL_ID: call.call_id or f"call_{call.span_id[:8]}",
        A.GEN_AI_TOOL_TYPE: "function",
        A.GEN_AI_CONVERSATION_ID: call.session,
        A.CODE: call.code,
        A.OK: call.ok,
        A.FIXABLE: call.code in _FIXABLE,
        A.REJECTED_STAGE: None if call.ok else call.stages[-1],
        A.ERROR_TYPE: None if call.ok else call.code,
        A.REPLAYED: call.replayed,
        A.CONFIRMED: call.confirmed,
        A.RESUMED: call.resumed,
        A.APPROVAL_ID: call.approval_id,
        A.APPROVAL_OUTCOME: call.approval_outcome,
        A.ATTEMPTS: call.attempts if call.attempts is not None else (1 if call.ok else 0),
        A.OUTCOME: "applied" if call.ok and effect == "write" else "not_applied",
        A.EFFECT: effect,
        A.RISK: "high" if effect == "write" else "low",
        A.STEP: call.step,
        A.TURN: call.turn,
        A.TOOL_VERSION: "1",
        A.SCHEMA_HASH: hashlib.sha1(call.tool.encode()).hexdigest()[:12],
        A.PRINCIPAL: call.principal,
        A.ROLE: call.role,
        A.IDEMPOTENCY_KEY_HASH: ("k_" + call.span_id[:8]) if effect == "write" else None,
        A.ARGUMENTS: call.arguments,
        A.INVALID_FIELDS: list(call.invalid_fields) or None,
    }
    attrs.update(call.extra)
    return attrs


def _spans(call: Call) -> Iterator[dict[str, Any]]:
    durations = list(call.stage_ns) or [1_000_000] * len(call.stages)
    t = call.start_ns
    children = []
    for i, (stage, ns) in enumerate(zip(call.stages, durations, strict=True)):
        last = i == len(call.stages) - 1
        outcome = ("final" if call.ok else "reject") if last else "pass"
        span: dict[str, Any] = {
            "traceId": call.trace_id,
            "spanId": _stage_span_id(call, i),
            "parentSpanId": call.span_id,
            "name": f"{A.STAGE_SPAN_PREFIX}{stage}",
            "kind": 1,
            "startTimeUnixNano": str(t),
            "endTimeUnixNano": str(t + ns),
            "attributes": _attrs(
                {
                    A.STAGE_NAME: stage,
                    A.STAGE_OUTCOME: outcome,
                    A.STAGE_CODE: call.code if last else None,
                }
            ),
            "status": {"code": 2, "message": call.code} if last and not call.ok else {},
        }
        if stage == "execute" and call.retries:
            span["events"] = [
                {
                    "timeUnixNano": str(t + (n + 1) * ns // (len(call.retries) + 1)),
                    "name": A.RETRY_EVENT,
                    "attributes": _attrs(
                        {A.RETRY_ATTEMPT: n + 1, A.RETRY_ERROR: err, A.RETRY_DELAY: 0.1 * 2**n}
                    ),
                }
                for n, err in enumerate(call.retries)
            ]
        children.append(span)
        t += ns
    yield from children
    yield {
        "traceId": call.trace_id,
        "spanId": call.span_id,
        "name": f"{A.CALL_SPAN_PREFIX}{call.tool}",
        "kind": 1,
        "startTimeUnixNano": str(call.start_ns),
        "endTimeUnixNano": str(t + 50_000),
        "attributes": _attrs(_call_attributes(call)),
        "status": {} if call.ok else {"code": 2, "message": call.code},
    }


def encode_request(spans: Sequence[dict[str, Any]], service: str) -> str:
    """One ``ExportTraceServiceRequest`` as a JSON line (without the newline)."""
    request = {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs({"service.name": service})},
                "scopeSpans": [
                    {"scope": {"name": "callgate", "version": "0.1.0"}, "spans": list(spans)}
                ],
            }
        ]
    }
    return json.dumps(request, separators=(",", ":"))


class SpanFileWriter:
    """Write calls as OTLP JSON lines, ``batch`` spans per line, one service per line."""

    def __init__(self, stream: IO[str], *, batch: int = 512) -> None:
        self._stream = stream
        self._batch = batch
        self._pending: dict[str, list[dict[str, Any]]] = {}

    def write(self, call: Call) -> None:
        """Queue the call's spans; a full batch is written out as one line."""
        pending = self._pending.setdefault(call.service, [])
        pending.extend(_spans(call))
        if len(pending) >= self._batch:
            self._flush(call.service)

    def close(self) -> None:
        """Write what is left (the stream stays open)."""
        for service in list(self._pending):
            self._flush(service)

    def _flush(self, service: str) -> None:
        spans = self._pending.pop(service, [])
        if spans:
            self._stream.write(encode_request(spans, service) + "\n")


def write_span_file(path: Path, calls: Iterable[Call], *, batch: int = 512) -> Path:
    """Write ``calls`` to ``path`` (gzip when it ends in ``.gz``); return the path."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as stream:
        writer = SpanFileWriter(stream, batch=batch)
        for call in calls:
            writer.write(call)
        writer.close()
    return path


_TOOLS = ("get_order", "get_refund_status", "search_refund_policy", "refund_order")
_READ_CODES = (
    ("OK", 80),
    ("INVALID_ARGUMENTS", 8),
    ("NOT_FOUND", 5),
    ("UNKNOWN_TOOL", 1),
    ("INVALID_JSON", 1),
    ("LOOP_DETECTED", 2),
    ("STEP_LIMIT", 1),
    ("UPSTREAM_UNAVAILABLE", 1),
    ("PERMISSION_DENIED", 1),
)
_WRITE_CODES = (
    ("OK", 40),
    ("CONFIRMATION_REQUIRED", 20),
    ("TAINTED_CONTEXT", 4),
    ("INVALID_ARGUMENTS", 12),
    ("AMOUNT_EXCEEDS_REFUNDABLE", 6),
    ("CURRENCY_MISMATCH", 4),
    ("POLICY_LIMIT", 4),
    ("LOOP_DETECTED", 3),
    ("VALIDATION_BUDGET_EXHAUSTED", 1),
    ("TIMEOUT", 2),
    ("IN_PROGRESS", 1),
)
_DECISIONS = (
    ("OK", "approved", 60),
    ("NOT_FOUND", "approved", 5),
    ("CONFIRMATION_DENIED", "denied", 20),
    ("CONFIRMATION_EXPIRED", "expired", 10),
    ("", "", 5),
)
_FIELDS = ("/amount_cents", "/currency", "/order_id", "/reason")


def _pick(rng: random.Random, table: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
    return rng.choices(table, weights=[row[-1] for row in table])[0]


def generate(
    *,
    spans: int,
    seed: int = 0,
    start_ns: int = 1_767_225_600_000_000_000,
    services: Sequence[str] = ("support-bot", "ops-agent"),
    principals: int = 200,
    tag: str = "",
) -> Iterator[Call]:
    """Yield calls until about ``spans`` spans: sessions of 1-12 calls over a few days.

    ``tag`` (hex digits) prefixes every trace id and session so that several generated sets can be
    loaded side by side without colliding.
    """
    rng = random.Random(seed)
    made = 0
    n_session = 0
    t = start_ns
    while made < spans:
        n_session += 1
        session = f"s-{tag}{n_session:07d}"
        principal = f"p_{rng.randrange(principals):012x}"
        service = services[n_session % len(services)]
        step = 0
        pending: list[tuple[str, int]] = []
        for _ in range(rng.randint(1, 12)):
            step += 1
            t += rng.randint(1, 4_000_000_000)
            tool = _TOOLS[min(3, int(rng.random() * 5))]
            code = _pick(rng, _WRITE_CODES if tool in _WRITES else _READ_CODES)[0]
            approval = ""
            if code in ("CONFIRMATION_REQUIRED", "TAINTED_CONTEXT"):
                approval = f"apr_{tag}{n_session:07d}{step:02d}"
                pending.append((approval, step))
            call = _call(rng, tag, n_session, step, tool, code, t, session, principal, service)
            if approval:
                call = _replace(call, approval_id=approval, approval_outcome="pending")
            made += len(call.stages) + 1
            yield call
        for approval, _origin in pending:
            final, outcome, _w = _pick(rng, _DECISIONS)
            if not final:
                continue  # still pending
            step += 1
            t += rng.randint(1_000_000_000, 60_000_000_000)
            call = _call(
                rng, tag, n_session, step, "refund_order", final, t, session, principal, service
            )
            call = _replace(
                call,
                approval_id=approval,
                approval_outcome=outcome,
                resumed=True,
                confirmed=outcome == "approved",
            )
            made += len(call.stages) + 1
            yield call


def _call(
    rng: random.Random,
    tag: str,
    session_no: int,
    step: int,
    tool: str,
    code: str,
    t: int,
    session: str,
    principal: str,
    service: str,
) -> Call:
    trace = f"{tag}{session_no:012x}{step:04x}{rng.getrandbits(64):016x}"[:32]
    n_stages = len(STAGES) if code == "OK" else STAGES.index(_STAGE_OF_CODE[code]) + 1
    stage_ns = [rng.randint(20_000, 400_000) for _ in range(n_stages)]
    retries: tuple[str, ...] = ()
    if code in ("OK", "TIMEOUT", "UPSTREAM_UNAVAILABLE") and rng.random() < 0.1:
        retries = ("ConnectionError",) * rng.randint(1, 2)
    if code in ("OK", "TIMEOUT", "UPSTREAM_UNAVAILABLE"):
        stage_ns[-1] = rng.randint(2_000_000, 80_000_000) * (1 + len(retries))
    fields = tuple(rng.sample(_FIELDS, rng.randint(1, 2))) if code == "INVALID_ARGUMENTS" else ()
    return Call(
        trace_id=trace,
        span_id=f"{rng.getrandbits(64):016x}",
        tool=tool,
        session=session,
        principal=principal,
        service=service,
        step=step,
        code=code,
        start_ns=t,
        stage_ns=stage_ns,
        replayed=code == "OK" and tool in _WRITES and rng.random() < 0.05,
        attempts=(1 + len(retries)) if n_stages == len(STAGES) else 0,
        invalid_fields=fields,
        retries=retries,
        arguments='{"order_id":"ORD-1001","amount_cents":2590,"currency":"BRL"}'
        if tool in _WRITES
        else '{"order_id":"ORD-1001"}',
    )


def _replace(call: Call, **changes: Any) -> Call:
    from dataclasses import replace

    return replace(call, **changes)
