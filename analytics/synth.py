"""Synthetic span files in the span contract's encoding, for tests, the benchmark and demos.

Lines are OTLP JSON ``ExportTraceServiceRequest`` objects exactly as the trail writes them: each
:class:`Call` becomes ``telemetry.records.SpanRecord`` values and goes through the one encoder
(``telemetry.encoder.encode_spans``), so fixtures cannot drift from the trail. Analytics never
imports the guard, so the codes this synthetic world uses are listed once in :data:`CODES` with
their stage and fixability; a test holds them equal to ``guard.codes`` (a fixture may also set a
call's ``stage``/``fixable`` itself, for domain codes).
:class:`SpanFileWriter` turns :class:`Call` values into lines; :func:`generate` draws a
deterministic, realistic mix of sessions and calls from a seed.
"""

from __future__ import annotations

import gzip
import hashlib
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from telemetry import attributes as A
from telemetry.encoder import encode_spans
from telemetry.records import (
    STATUS_ERROR,
    STATUS_UNSET,
    AttributeValue,
    EventRecord,
    SpanRecord,
    stage_record,
)

__all__ = [
    "CODES",
    "STAGES",
    "Call",
    "SpanFileWriter",
    "code_fixable",
    "code_stage",
    "encode_request",
    "generate",
    "spans_of",
    "write_span_file",
]

STAGES: tuple[str, ...] = A.STAGES
"""The pipeline's stages in order (the ``guard.<stage>`` child spans)."""

_WRITES = frozenset({"refund_order"})
SCOPE_VERSION = "0.1.0"


CODES: dict[str, tuple[str, bool]] = {
    "OK": ("execute", False),
    "STEP_LIMIT": ("budget", False),
    "RATE_LIMITED": ("budget", False),
    "VALIDATION_BUDGET_EXHAUSTED": ("budget", False),
    "UNKNOWN_TOOL": ("resolve", True),
    "TOOL_NOT_ALLOWED": ("resolve", False),
    "PERMISSION_DENIED": ("resolve", False),
    "INVALID_JSON": ("parse", True),
    "INVALID_ARGUMENTS": ("schema", True),
    "LOOP_DETECTED": ("idempotency", False),
    "IN_PROGRESS": ("idempotency", False),
    "IDEMPOTENCY_CONFLICT": ("idempotency", False),
    "NOT_FOUND": ("rules", True),
    "PREREQUISITE_MISSING": ("rules", True),
    "CURRENCY_MISMATCH": ("rules", True),
    "AMOUNT_EXCEEDS_REFUNDABLE": ("rules", True),
    "INVALID_STATE": ("rules", False),
    "POLICY_LIMIT": ("policy", False),
    "TAINTED_CONTEXT": ("confirm", False),
    "CONFIRMATION_REQUIRED": ("confirm", False),
    "CONFIRMATION_DENIED": ("confirm", False),
    "CONFIRMATION_EXPIRED": ("confirm", False),
    "UPSTREAM_UNAVAILABLE": ("execute", False),
    "TIMEOUT": ("execute", False),
    "UPSTREAM_REJECTED": ("execute", False),
    "INTERNAL_ERROR": ("execute", False),
}
"""The codes of the synthetic world: code -> (stage, fixable), as ``guard.codes`` has them; the
span carries both (``guard.code.stage``, ``guard.fixable``), so analytics reads them, never this."""


def code_stage(code: str) -> str:
    """The stage a code belongs to."""
    return CODES[code][0]


def code_fixable(code: str) -> bool:
    """Whether the model can fix a call rejected with ``code``."""
    return CODES[code][1]


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
    stage: str = ""
    """The stage of ``code``; empty: ``guard.codes`` says (set it for codes the guard has not)."""
    fixable: bool | None = None
    """Whether ``code`` is fixable; None: ``guard.codes`` says."""

    @property
    def ok(self) -> bool:
        """The call succeeded."""
        return self.code == "OK"

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages that ran: up to the rejecting one, or all of them."""
        return STAGES[: STAGES.index(self.code_stage) + 1]

    @property
    def code_stage(self) -> str:
        """The stage ``code`` belongs to."""
        return self.stage or code_stage(self.code)

    @property
    def code_fixable(self) -> bool:
        """Whether ``code`` is one the model can fix."""
        return self.fixable if self.fixable is not None else code_fixable(self.code)


def _attrs(pairs: dict[str, Any]) -> list[tuple[str, AttributeValue]]:
    out: list[tuple[str, AttributeValue]] = []
    for key, value in pairs.items():
        if value is None or value == "":
            continue
        out.append((key, list(value) if isinstance(value, list | tuple) else value))
    return out


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
        A.CODE_STAGE: call.code_stage,
        A.OK: call.ok,
        A.FIXABLE: call.code_fixable,
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


def spans_of(call: Call) -> list[SpanRecord]:
    """The call's stage spans, then its call span, as records for the one encoder."""
    durations = list(call.stage_ns) or [1_000_000] * len(call.stages)
    t = call.start_ns
    records: list[SpanRecord] = []
    fixable = call.code_fixable
    for i, (stage, ns) in enumerate(zip(call.stages, durations, strict=True)):
        last = i == len(call.stages) - 1
        record = stage_record(
            trace_id=call.trace_id,
            span_id=_stage_span_id(call, i),
            parent_span_id=call.span_id,
            stage=stage,
            outcome=("final" if call.ok else "reject") if last else "pass",
            code=call.code if last else None,
            fixable=fixable if last else None,
            start_ns=t,
            end_ns=t + ns,
        )
        if stage == "execute" and call.retries:
            record.events = [
                EventRecord(
                    name=A.RETRY_EVENT,
                    time_ns=t + (n + 1) * ns // (len(call.retries) + 1),
                    attributes=_attrs(
                        {A.RETRY_ATTEMPT: n + 1, A.RETRY_ERROR: err, A.RETRY_DELAY: 0.1 * 2**n}
                    ),
                )
                for n, err in enumerate(call.retries)
            ]
        records.append(record)
        t += ns
    records.append(
        SpanRecord(
            trace_id=call.trace_id,
            span_id=call.span_id,
            parent_span_id="",
            name=f"{A.CALL_SPAN_PREFIX}{call.tool}",
            start_ns=call.start_ns,
            end_ns=t + 50_000,
            attributes=_attrs(_call_attributes(call)),
            status_code=STATUS_UNSET if call.ok else STATUS_ERROR,
            status_message="" if call.ok else call.code,
        )
    )
    return records


def encode_request(spans: Sequence[SpanRecord | str], service: str) -> str:
    """One ``ExportTraceServiceRequest`` as a JSON line (without the newline)."""
    return encode_spans(
        spans,
        resource={"service.name": service},
        scope_name=A.INSTRUMENTATION_SCOPE,
        scope_version=SCOPE_VERSION,
    )


class SpanFileWriter:
    """Write calls as OTLP JSON lines, ``batch`` spans per line, one service per line."""

    def __init__(self, stream: IO[str], *, batch: int = 512) -> None:
        self._stream = stream
        self._batch = batch
        self._pending: dict[str, list[SpanRecord]] = {}

    def write(self, call: Call) -> None:
        """Queue the call's spans; a full batch is written out as one line."""
        pending = self._pending.setdefault(call.service, [])
        pending.extend(spans_of(call))
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
    n_stages = len(STAGES) if code == "OK" else STAGES.index(code_stage(code)) + 1
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
