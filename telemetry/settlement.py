"""The ``guard.outcome.settled`` span: an unknown write outcome settled, by whom, as what.

Two writers make it. Inside a call whose status check (``reconcile=``) settled an earlier
attempt's unknown outcome, ``telemetry.spans`` adds it as a child of the call span, over the
idempotency stage in which the check ran. ``callgate outcomes settle`` (a person) writes it as a
trace of its own to the trail directory (``write_settlement``), chained like every trail line.
Who is masked as principals are: a person's name is a keyed hash, never written in clear.
"""

from __future__ import annotations

import os
from pathlib import Path

from telemetry import attributes as attr
from telemetry.chain import chain_key
from telemetry.encoder import encode_spans
from telemetry.masking import Masker
from telemetry.records import AttributeValue, SpanRecord, encodable, new_ids
from telemetry.spanfile import SpanFileWriter

__all__ = ["STATUS_CHECK", "settlement_record", "write_settlement"]

STATUS_CHECK = "status_check"
"""``guard.settled.by`` (and ``.source``) when the tool's status check settled it."""


def settlement_record(
    masker: Masker,
    *,
    outcome: str,
    key: str,
    tool: str | None,
    by: str,
    approval_id: str | None,
    start_ns: int,
    end_ns: int,
    ids: tuple[str, str, str] | None = None,
) -> SpanRecord:
    """The span of one settlement. ``by`` is ``STATUS_CHECK`` or the person who settled it;
    ``ids`` is (trace id, span id, parent span id), else a new trace. ``key`` is the key the
    backend was sent, written as the call spans write keys (a short keyed hash)."""
    if ids is None:
        trace_id, span_ids = new_ids(0)
        ids = (trace_id, span_ids[0], "")
    checked = by == STATUS_CHECK
    attributes: list[tuple[str, AttributeValue]] = [
        (attr.SETTLED_SOURCE, STATUS_CHECK if checked else "human"),
        (attr.SETTLED_BY, STATUS_CHECK if checked else masker.principal(by)),
        (attr.OUTCOME, outcome),
        (attr.IDEMPOTENCY_KEY_HASH, masker.short_hash(key)),
    ]
    if tool is not None:
        attributes.append((attr.GEN_AI_TOOL_NAME, encodable(masker.cap(tool))))
    if approval_id is not None:
        attributes.append((attr.APPROVAL_ID, encodable(approval_id)))
    return SpanRecord(
        trace_id=ids[0],
        span_id=ids[1],
        parent_span_id=ids[2],
        name=attr.SETTLED_SPAN,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
    )


def write_settlement(
    directory: str | os.PathLike[str],
    record: SpanRecord,
    *,
    masking_key: bytes | None,
    service_name: str = "callgate-outcomes",
) -> Path:
    """Append ``record`` to the trail in ``directory`` as one chained line of its own file (a
    writer of its own, as every process's trail is); returns that file."""
    writer = SpanFileWriter(
        directory,
        chain_key=chain_key(masking_key) if masking_key is not None else None,
    )
    try:
        line = encode_spans(
            [record],
            resource={"service.name": service_name},
            scope_name=attr.INSTRUMENTATION_SCOPE,
        )
        writer.write_lines([line])
        return writer.files[-1]
    finally:
        writer.close()
