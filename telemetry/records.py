"""Span records: one span, ready to encode or to replay through a tracer. Standard library only.

``SpanRecord`` (with ``EventRecord``, ``LinkRecord``) is what every writer of spans builds: the
trail from a guard ``Call`` (``telemetry.spans``), the sidecar from what it received
(``telemetry.sidecar.proto`` from a protobuf message; ``telemetry.sidecar.wire`` from fragments of its
bytes), the benchmarks and the synthetic fixtures (``analytics.synth``); ``ResourceGroup`` and
``ScopeGroup`` group them as a request does. The one encoder is ``telemetry.encoder``.

Every string is made encodable here (``encodable``): UTF-8 cannot carry a lone surrogate
(``"\\ud800"``, which a model can send as a JSON escape), so such characters are replaced by U+FFFD and
the span says so (``guard.text_replaced``), rather than failing the whole line. Stage spans have few
distinct shapes (name, attributes, status), built once each (``stage_shape``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, overload

from telemetry import attributes as attr

__all__ = [
    "KIND_INTERNAL",
    "SPAN_ID_SUFFIXES",
    "STATUS_ERROR",
    "STATUS_UNSET",
    "AttributeValue",
    "CallIds",
    "EventRecord",
    "KeyValueList",
    "LinkRecord",
    "ResourceGroup",
    "ScopeGroup",
    "Shape",
    "SpanIds",
    "SpanRecord",
    "encodable",
    "encodable_attributes",
    "given_prefix",
    "new_id_prefix",
    "new_ids",
    "shape_of",
    "stage_record",
]

AttributeValue: TypeAlias = str | bool | int | float | list[str]
"""The attribute value types the contract uses."""

KIND_INTERNAL = 1
"""OTLP ``SPAN_KIND_INTERNAL``."""
STATUS_UNSET = 0
STATUS_ERROR = 2


@dataclass(slots=True, kw_only=True)
class EventRecord:
    """A timestamped event on a span (a retry)."""

    name: str
    time_ns: int
    attributes: Sequence[tuple[str, AttributeValue]]
    dropped_attributes_count: int = 0
    """Attributes the event's sender left out (what other OTLP clients send; 0 for callgate's)."""


@dataclass(slots=True, kw_only=True)
class LinkRecord:
    """A link from a span to another span (OTLP ``Span.Link``)."""

    trace_id: str
    span_id: str
    trace_state: str = ""
    attributes: Sequence[tuple[str, Any]] = ()
    dropped_attributes_count: int = 0
    flags: int = 0


@dataclass(slots=True, kw_only=True)
class SpanRecord:
    """One span, ready to encode or replay through a tracer. Ids are lowercase hex.

    callgate's own spans use the first fields; the rest carry what other OTLP clients send
    (the sidecar), encoded only when set.
    """

    trace_id: str
    span_id: str
    parent_span_id: str
    """Empty for a root span."""
    name: str
    start_ns: int
    end_ns: int
    attributes: Sequence[tuple[str, AttributeValue]]
    kind: int = KIND_INTERNAL
    status_code: int = STATUS_UNSET
    status_message: str = ""
    events: Sequence[EventRecord] = ()
    trace_state: str = ""
    flags: int = 0
    links: Sequence[LinkRecord] = ()
    dropped_attributes_count: int = 0
    dropped_events_count: int = 0
    dropped_links_count: int = 0


@dataclass(slots=True, kw_only=True)
class ScopeGroup:
    """Spans under one instrumentation scope (OTLP ``ScopeSpans``)."""

    name: str = ""
    version: str = ""
    attributes: Sequence[tuple[str, Any]] = ()
    dropped_attributes_count: int = 0
    spans: Sequence[SpanRecord | str] = ()
    schema_url: str = ""


@dataclass(slots=True, kw_only=True)
class ResourceGroup:
    """Scopes under one resource (OTLP ``ResourceSpans``)."""

    attributes: Sequence[tuple[str, Any]] = ()
    dropped_attributes_count: int = 0
    scopes: Sequence[ScopeGroup] = ()
    schema_url: str = ""


class KeyValueList(list[tuple[str, Any]]):
    """An OTLP ``kvlistValue``: key-value pairs in order (keys may repeat)."""


# encodable text

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """``text`` with every lone surrogate (which UTF-8 cannot carry) replaced by U+FFFD."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def encodable_attributes(
    attributes: list[tuple[str, AttributeValue]],
) -> bool:
    """Make every string in ``attributes`` encodable, in place; True when anything was replaced."""
    replaced = False
    for index, (key, value) in enumerate(attributes):
        if value.__class__ is str:
            text: str = value
            if not text.isascii() and _SURROGATE.search(text):
                attributes[index] = (key, _SURROGATE.sub("\ufffd", text))
                replaced = True
        elif isinstance(value, list) and any(
            not item.isascii() and _SURROGATE.search(item) for item in value
        ):
            attributes[index] = (key, [encodable(item) for item in value])
            replaced = True
    return replaced


# ids

SPAN_ID_SUFFIXES = tuple(format(index, "02x") for index in range(1, 256))
"""The last byte of a call's span ids, in hex: the call span's first, then each stage's."""


_POOL_CALLS = 256
"""Calls' ids drawn by one ``urandom``: a system call per call cost more than the rest of the
ids' making."""
_pool: list[str] = []
"""Random hex of 23 bytes each (a trace id and a span-id prefix), taken from the end."""
os.register_at_fork(after_in_child=_pool.clear)  # a forked child must not repeat its parent's ids


def new_id_prefix() -> tuple[str, str]:
    """A random trace id, and the random 56-bit prefix a call's span ids share.

    Span id ``i`` of the call is the prefix and ``SPAN_ID_SUFFIXES[i]``: ids need only be unique
    within their trace. They come from ``os.urandom`` drawn for many calls at once; ``pop`` is
    atomic, so threads drawing together never share one (a refill may race another: both add).
    """
    try:
        raw = _pool.pop()
    except IndexError:
        block = os.urandom(23 * _POOL_CALLS).hex()
        _pool.extend([block[start : start + 46] for start in range(0, len(block), 46)])
        raw = _pool.pop()
    return raw[:32], raw[32:46]


class SpanIds(Sequence[str]):
    """A call's span ids as ``new_ids`` draws them: a random 56-bit prefix and the last byte
    ``SPAN_ID_SUFFIXES[i]`` of id ``i``, each made only when read. Drawing a call's ids on the
    calling thread is then one prefix, and a writer that lays the call out by prefix
    (``given_prefix``) reads it without checking every id."""

    __slots__ = ("_count", "prefix")

    def __init__(self, prefix: str, count: int) -> None:
        if count > len(SPAN_ID_SUFFIXES):
            raise ValueError(f"{count} spans: only {len(SPAN_ID_SUFFIXES)} share a prefix")
        self.prefix = prefix
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self.prefix + SPAN_ID_SUFFIXES[i] for i in range(self._count)[index]]
        return self.prefix + SPAN_ID_SUFFIXES[range(self._count)[index]]


CallIds: TypeAlias = tuple[str, Sequence[str]]
"""A call's trace id and its span ids (the call span's, then one per stage), in hex: drawn once
per call (``new_ids``), so every copy of the call (the trail, OTLP) names it the same."""


def new_ids(stages: int) -> CallIds:
    """A random trace id, and span ids that share a random 56-bit prefix and differ in the last byte
    (``new_id_prefix``, ``SpanIds``); random throughout past 254 stages."""
    trace_id, prefix = new_id_prefix()
    if stages >= len(SPAN_ID_SUFFIXES):  # pragma: no cover - no pipeline has that many stages
        more = os.urandom(8 * (stages + 1)).hex()
        return trace_id, [more[16 * index : 16 * index + 16] for index in range(stages + 1)]
    return trace_id, SpanIds(prefix, stages + 1)


def given_prefix(ids: CallIds | None, count: int) -> tuple[str, str] | None:
    """``(trace_id, prefix)`` of ids drawn by ``new_ids`` for ``count`` spans, so a call's text
    can be made from its templates under them; None for no ids, ids drawn for another number of
    spans (they cannot name these: fresh ones keep the call), or ids of another layout."""
    if ids is None or len(ids[1]) != count or count > len(SPAN_ID_SUFFIXES):
        return None
    trace_id, span_ids = ids
    if span_ids.__class__ is SpanIds:  # made from its prefix: no id to check
        return trace_id, span_ids.prefix
    if not count:
        return None
    prefix = span_ids[0][:-2]
    if all(span_id == prefix + SPAN_ID_SUFFIXES[i] for i, span_id in enumerate(span_ids)):
        return trace_id, prefix
    return None


# stage spans: few distinct shapes, built once each

Shape: TypeAlias = tuple[str, tuple[tuple[str, AttributeValue], ...], int, str]
"""A stage span's name, shared attribute tuple, status code and status message."""
_Shape = Shape
_shapes: dict[tuple[str, str, str | None, bool | None], Shape] = {}
_shape_ids: dict[int, Shape] = {}
"""id of a cached shape's attribute tuple -> the shape (which holds the tuple, so the id stays its)."""


def shape_of(attributes: object) -> Shape | None:
    """The cached stage shape whose attribute tuple is ``attributes`` (the object), if any."""
    shape = _shape_ids.get(id(attributes))
    return shape if shape is not None and shape[1] is attributes else None


def stage_shape(name: str, outcome: str, code: str | None, fixable: bool | None = None) -> _Shape:
    """Name, attributes and status of a stage span: few distinct ones, so built once each.

    ``code`` is the code the stage ended the call with (its last stage); ``fixable`` goes on a
    rejecting stage span. The attributes are a tuple shared between spans; the encoder caches the
    text of each shape (``telemetry.encoder.encode_shaped``).
    """
    key = (name, outcome, code, fixable)
    shape = _shapes.get(key)
    if shape is None:
        attributes: list[tuple[str, AttributeValue]] = [
            (attr.STAGE_NAME, name),
            (attr.STAGE_OUTCOME, outcome),
        ]
        if code is not None:
            attributes.append((attr.STAGE_CODE, str(code)))
        rejected = outcome == "reject"
        if rejected and fixable is not None:
            attributes.append((attr.STAGE_FIXABLE, fixable))
        encodable_attributes(attributes)
        shape = (
            attr.STAGE_SPAN_PREFIX + encodable(name),
            tuple(attributes),
            STATUS_ERROR if rejected else STATUS_UNSET,
            encodable(str(code)) if rejected and code is not None else "",
        )
        if len(_shapes) < 4096:
            _shapes[key] = shape
            _shape_ids[id(shape[1])] = shape
    return shape


def stage_record(
    *,
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    stage: str,
    outcome: str,
    code: str | None,
    fixable: bool | None,
    start_ns: int,
    end_ns: int,
) -> SpanRecord:
    """The record of one stage span."""
    name, attributes, status_code, status_message = stage_shape(stage, outcome, code, fixable)
    return SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        name=name,
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
        status_code=status_code,
        status_message=status_message,
    )
