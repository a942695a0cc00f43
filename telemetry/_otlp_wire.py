"""OTLP/protobuf request bytes -> OTLP JSON line, reading the wire format for the repetitive parts.

Callgate's spans repeat themselves: nine stage spans a call whose attributes, status and name are
the same from call to call, only ids and times differ; and a call span's attributes are mostly
codes, tools, flags and steps. ``encode_wire`` walks the serialized request itself: the ids, name,
kind and times at the head of each span are sliced out of the bytes, and what follows (each
attribute, then the status and any other field) is looked up by its exact bytes in a cache of
JSON fragments. Only a fragment never seen before is decoded with upb and encoded by
``telemetry._otlp_proto``; a fragment is kept once it has been seen twice, so unique values do not
fill the cache.

The result is exactly what ``encode_request`` makes of the parsed message (a test holds them equal
over generated messages and mangled bytes). Whatever this walk does not expect (fields out of order
or repeated, a trace state, a malformed length, bytes upb would reject) hands that span, or the
whole request, to the upb path: ``None`` from ``encode_wire`` means "parse it the usual way".
"""

from __future__ import annotations

from collections.abc import Iterator
from json.encoder import encode_basestring
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from telemetry._otlp_proto import (
    Encoded,
    _attributes,
    _cached_text,
    _field_encoder,
    _resource_field,
    _schema_field,
    _scope_field,
    _span,
)

__all__ = ["encode_wire"]

_CACHE_LIMIT = 1 << 14
_LARGEST = 1024
"""Fragments longer than this are not cached: the caches stay under ~3 * 16384 * 2 KiB."""
_ERROR = "trace_id must be 16 bytes and span_id 8 bytes"
_escape = encode_basestring
_attribute_texts: dict[bytes, str] = {}
"""Exact bytes of one attribute -> its JSON text."""
_tail_texts: dict[bytes, str] = {}
"""Exact bytes of a span's fields after its attributes -> their JSON text."""
_rest_texts: dict[bytes, str] = {}
"""Exact bytes of a span's attributes and later fields -> their JSON text (stage spans repeat)."""
_seen: set[tuple[int, int]] = set()
_heads: dict[bytes, str] = {}
"""Exact bytes of a span's name and kind fields -> their JSON text."""
_span_fields = {field.number: _field_encoder(field) for field in Span.DESCRIPTOR.fields}


class _Unexpected(Exception):
    """This walk does not handle what it found: the caller takes the upb path."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _Unexpected
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _remember(cache: dict[bytes, str], key: bytes, text: str) -> None:
    """Keep ``text`` for ``key`` from its second sighting on (values seen once are not cached)."""
    if len(key) > _LARGEST:
        return  # the caches hold small repeating fragments; a large value costs memory, not time
    digest = (id(cache), hash(key))
    if digest in _seen:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = text
    else:
        if len(_seen) >= _CACHE_LIMIT:
            _seen.clear()
        _seen.add(digest)


def _attribute(key: bytes) -> str:
    text = _attribute_texts.get(key)
    if text is None:
        text = _attributes([KeyValue.FromString(key)])[1:-1]
        _remember(_attribute_texts, key, text)
    return text


def _tail(key: bytes) -> str:
    """The JSON of a span's fields after its attributes (``,``-led), from their bytes."""
    text = _tail_texts.get(key)
    if text is None:
        span = Span.FromString(key)
        fields = span.ListFields()
        if any(field.number <= 9 for field, _ in fields):
            raise _Unexpected  # an early field again, or attributes after other fields
        text = "".join(["," + _span_fields[field.number](value) for field, value in fields])
        _remember(_tail_texts, key, text)
    return text


def _head(key: bytes) -> str:
    """``,"name":...,"kind":N`` from the bytes of a span's name and kind fields."""
    text = _heads.get(key)
    if text is None:
        span = Span.FromString(key)
        text = ""
        if span.name:
            text += ',"name":' + _escape(span.name)
        if span.kind:
            text += ',"kind":' + str(span.kind)
        if len(_heads) < _CACHE_LIMIT:
            _heads[key] = text
    return text


def _span_text(data: bytes, pos: int, end: int) -> str | None:
    """One span's JSON from its bytes ``data[pos:end]``; ``None`` when its ids are malformed."""
    start = pos
    if data[pos] != 0x0A or data[pos + 1] != 16 or data[pos + 18] != 0x12 or data[pos + 19] != 8:
        return _slow_span(data, start, end)
    text = (
        '{"traceId":"' + data[pos + 2 : pos + 18].hex()
        + '","spanId":"' + data[pos + 20 : pos + 28].hex() + '"'
    )  # fmt: skip
    pos += 28
    if pos < end and data[pos] == 0x22:  # parent_span_id
        if data[pos + 1] != 8:
            return _slow_span(data, start, end)
        text += ',"parentSpanId":"' + data[pos + 2 : pos + 10].hex() + '"'
        pos += 10
    head = pos
    if pos < end and data[pos] == 0x2A:  # name
        size = data[pos + 1]
        if size < 0x80:
            pos += 2 + size
        else:
            size, pos = _varint(data, pos + 1)
            pos += size
    if pos < end and data[pos] == 0x30:  # kind
        if data[pos + 1] < 0x80:
            pos += 2
        else:
            _, pos = _varint(data, pos + 1)
    if pos > end:
        raise _Unexpected
    if pos > head:
        key = data[head:pos]
        name = _heads.get(key)
        text += _head(key) if name is None else name
    if pos < end and data[pos] == 0x39:  # start_time_unix_nano
        value = int.from_bytes(data[pos + 1 : pos + 9], "little")
        if value:
            text += ',"startTimeUnixNano":"' + str(value) + '"'
        pos += 9
    if pos < end and data[pos] == 0x41:  # end_time_unix_nano
        value = int.from_bytes(data[pos + 1 : pos + 9], "little")
        if value:
            text += ',"endTimeUnixNano":"' + str(value) + '"'
        pos += 9
    if pos > end:
        raise _Unexpected
    rest = data[pos:end]
    whole = _rest_texts.get(rest)
    if whole is not None:  # a stage span: attributes and status seen before, as a whole
        return text + whole
    try:
        whole = _rest(data, pos, end)
    except _Unexpected:
        return _slow_span(data, start, end)
    _remember(_rest_texts, rest, whole)
    return text + whole


def _rest(data: bytes, pos: int, end: int) -> str:
    """The JSON of a span's attributes and later fields (``data[pos:end]``), closing brace included."""
    text = ""
    parts = []
    known = _attribute_texts
    while pos < end and data[pos] == 0x4A:  # attributes
        size = data[pos + 1]
        if size < 0x80:
            after = pos + 2
        else:
            size, after = _varint(data, pos + 1)
        pos = after + size
        if pos > end:
            raise _Unexpected
        key = data[after:pos]
        fragment = known.get(key)
        parts.append(_attribute(key) if fragment is None else fragment)
    if parts:
        text += ',"attributes":[' + ",".join(parts) + "]"
    if pos < end:
        text += _tail(data[pos:end])
    return text + "}"


def _slow_span(data: bytes, start: int, end: int) -> str | None:
    return _span(Span.FromString(data[start:end]))


def _fields(data: bytes, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(field number, start, end)`` of each length-delimited field in turn (never a list: a body of
    millions of empty fields must not become millions of tuples); anything else is unexpected."""
    while pos < end:
        tag = data[pos]
        if tag < 0x80:
            pos += 1
        else:
            tag, pos = _varint(data, pos)
        if tag & 7 != 2:
            raise _Unexpected
        size = data[pos]
        if size < 0x80:
            pos += 1
        elif data[pos + 1] < 0x80:
            size = (size & 0x7F) | (data[pos + 1] << 7)
            pos += 2
        else:
            size, pos = _varint(data, pos)
        if pos + size > end:
            raise _Unexpected
        yield tag >> 3, pos, pos + size
        pos += size


def encode_wire(body: bytes) -> Encoded | None:
    """The request in ``body`` as a line; ``None``: parse it with upb and use ``encode_request``."""
    try:
        return _encode(body)
    except (_Unexpected, IndexError):
        return None
    except Exception:  # upb refused a fragment: the full parse gives the real error
        return None


def _wrap(
    found: tuple[int, int] | None,
    schema: tuple[int, int] | None,
    data: bytes,
    head_field: Any,
    cls: Any,
) -> tuple[str, str]:
    """The text before and after the list of a resource or scope group (decoded even when unused:
    upb would refuse a corrupt one, so must this)."""
    head = "{"
    if found is not None:
        head += _cached_text(head_field, cls, data[found[0] : found[1]]) + ","
    tail = "]"
    if schema is not None:
        url = data[schema[0] : schema[1]].decode("utf-8")
        if url:
            tail += "," + _schema_field(url)
    return head, tail + "}"


def _encode(data: bytes) -> Encoded:
    groups: list[str] = []
    spans = rejected = 0
    error = ""
    for number, group_start, group_end in _fields(data, 0, len(data)):
        if number != 1:
            raise _Unexpected
        resource = group_schema = None
        scope_groups: list[str] = []
        for field, scope_start, scope_end in _fields(data, group_start, group_end):
            if field == 1 or field == 3:
                if (resource if field == 1 else group_schema) is not None:
                    raise _Unexpected  # upb would merge them, or keep the last
                if field == 1:
                    resource = (scope_start, scope_end)
                else:
                    group_schema = (scope_start, scope_end)
                continue
            if field != 2:
                raise _Unexpected
            scope = scope_schema = None
            texts = []
            for kind, start, end in _fields(data, scope_start, scope_end):
                if kind == 2:
                    text = (
                        _slow_span(data, start, end)
                        if end - start < 28
                        else _span_text(data, start, end)
                    )
                    if text is None:
                        rejected += 1
                        error = error or _ERROR
                    else:
                        texts.append(text)
                elif kind == 1 and scope is None:
                    scope = (start, end)
                elif kind == 3 and scope_schema is None:
                    scope_schema = (start, end)
                else:
                    raise _Unexpected
            scope_head, scope_tail = _wrap(
                scope, scope_schema, data, _scope_field, InstrumentationScope
            )
            if texts:
                spans += len(texts)
                scope_groups.append(scope_head + '"spans":[' + ",".join(texts) + scope_tail)
        group_head, group_tail = _wrap(resource, group_schema, data, _resource_field, Resource)
        if scope_groups:
            groups.append(group_head + '"scopeSpans":[' + ",".join(scope_groups) + group_tail)
    line = '{"resourceSpans":[' + ",".join(groups) + "]}" if groups else ""
    return Encoded(line, spans, rejected, error)
