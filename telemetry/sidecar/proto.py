"""Protobuf trace messages -> span records, for the one encoder (``telemetry.encoder``).

What the sidecar writes for a parsed (upb) ``ExportTraceServiceRequest``, and for anything the
wire reader (``telemetry.sidecar.wire``) leaves to the message path: each span becomes a
``SpanRecord`` (ids as hex), each group a ``ResourceGroup``/``ScopeGroup``, and
``telemetry.encoder`` writes the text. This module writes no JSON itself and imports no protobuf
(it reads the message objects' fields), so ``telemetry.otlpjson`` can use it cheaply.

Spans are checked on the way (ids of the right length); a bad span is left out and counted, so the
caller can answer with OTLP partial success instead of losing the good spans.

Not carried (the records have no place for them, and no trace reader uses them):
``KeyValue.key_strindex``, ``AnyValue.string_value_strindex`` (indexes into the profiles
signal's string table) and ``Resource.entity_refs`` (in development in OTLP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from telemetry.encoder import encode_request as encode_groups
from telemetry.records import (
    EventRecord,
    KeyValueList,
    LinkRecord,
    ResourceGroup,
    ScopeGroup,
    SpanRecord,
)

__all__ = [
    "ID_ERROR",
    "Encoded",
    "bad_ids",
    "encode_request",
    "pairs",
    "request_groups",
    "resource_group",
    "scope_group",
    "span_record",
]

ID_ERROR = "trace_id must be 16 bytes and span_id 8 bytes"
_PARENT_ERROR = "parent_span_id must be 8 bytes"


@dataclass(slots=True)
class Encoded:
    """One request as an OTLP JSON line, and what was left out of it."""

    line: str
    """The line without its newline; empty when no span was accepted."""
    spans: int
    """Spans in the line."""
    rejected: int
    """Spans left out because they are malformed."""
    error: str = ""
    """Why the first rejected span was left out."""


def _any(value: Any) -> Any:
    """A protobuf ``AnyValue`` as the Python value the encoder writes back (``None``: unset)."""
    kind = value.WhichOneof("value")
    if kind is None or kind == "string_value_strindex":
        return None
    if kind == "array_value":
        return [_any(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return KeyValueList((pair.key, _any(pair.value)) for pair in value.kvlist_value.values)
    return getattr(value, kind)


def pairs(attributes: Any) -> list[tuple[str, Any]]:
    """Repeated ``KeyValue`` as ``(key, value)`` pairs."""
    return [(pair.key, _any(pair.value)) for pair in attributes]


def bad_ids(span: Any) -> str:
    """Why ``span`` cannot be stored (ids of the wrong length), or ``""``."""
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        return ID_ERROR
    parent = span.parent_span_id
    if parent and len(parent) != 8:
        return _PARENT_ERROR
    return ""


def span_record(span: Any) -> SpanRecord:
    """A protobuf ``Span`` as a record (ids as they are, in hex: check them with ``bad_ids``)."""
    status = span.status
    return SpanRecord(
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        trace_state=span.trace_state,
        flags=span.flags,
        name=span.name,
        kind=span.kind,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes=pairs(span.attributes),
        dropped_attributes_count=span.dropped_attributes_count,
        events=[
            EventRecord(
                name=event.name,
                time_ns=event.time_unix_nano,
                attributes=pairs(event.attributes),
                dropped_attributes_count=event.dropped_attributes_count,
            )
            for event in span.events
        ],
        dropped_events_count=span.dropped_events_count,
        links=[
            LinkRecord(
                trace_id=link.trace_id.hex(),
                span_id=link.span_id.hex(),
                trace_state=link.trace_state,
                attributes=pairs(link.attributes),
                dropped_attributes_count=link.dropped_attributes_count,
                flags=link.flags,
            )
            for link in span.links
        ],
        dropped_links_count=span.dropped_links_count,
        status_code=status.code,
        status_message=status.message,
    )


def resource_group(resource: Any, schema_url: str = "") -> ResourceGroup:
    """A protobuf ``Resource`` as a group (without its scopes)."""
    return ResourceGroup(
        attributes=pairs(resource.attributes),
        dropped_attributes_count=resource.dropped_attributes_count,
        schema_url=schema_url,
    )


def scope_group(scope: Any, schema_url: str = "") -> ScopeGroup:
    """A protobuf ``InstrumentationScope`` as a group (without its spans)."""
    return ScopeGroup(
        name=scope.name,
        version=scope.version,
        attributes=pairs(scope.attributes),
        dropped_attributes_count=scope.dropped_attributes_count,
        schema_url=schema_url,
    )


def request_groups(request: Any, *, check: bool = False) -> tuple[list[ResourceGroup], int, str]:
    """The request's groups of records, the spans rejected, and why the first was.

    With ``check``, spans with malformed ids are left out (and counted), and so are groups left
    without spans; without it, everything is kept as it is.
    """
    resources = []
    rejected = 0
    error = ""
    for resource_spans in request.resource_spans:
        scopes = []
        for scope_spans in resource_spans.scope_spans:
            spans: list[SpanRecord | str] = []
            for span in scope_spans.spans:
                why = bad_ids(span) if check else ""
                if why:
                    rejected += 1
                    error = error or why
                else:
                    spans.append(span_record(span))
            if spans or not check:
                scope = scope_group(scope_spans.scope, scope_spans.schema_url)
                scope.spans = spans
                scopes.append(scope)
        if scopes or not check:
            group = resource_group(resource_spans.resource, resource_spans.schema_url)
            group.scopes = scopes
            resources.append(group)
    return resources, rejected, error


def encode_request(request: Any) -> Encoded:
    """``request`` as one OTLP JSON line, malformed spans left out (and counted).

    Resource and scope groups whose spans were all rejected are left out too, so the line holds only
    what was accepted; a request with no span gives an empty line.
    """
    resources, rejected, error = request_groups(request, check=True)
    spans = sum(len(scope.spans) for group in resources for scope in group.scopes)
    return Encoded(encode_groups(resources) if resources else "", spans, rejected, error)
