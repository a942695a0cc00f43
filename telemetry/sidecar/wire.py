"""OTLP/protobuf request bytes -> the one encoder's line, reading the wire format for the repetitive parts.

Callgate's spans repeat themselves: nine stage spans a call whose attributes, status and name are
the same from call to call, only ids and times differ; and a call span's attributes are mostly
codes, tools, flags and steps. ``encode_wire`` walks the serialized request itself: the ids and
times at the head of each span are sliced out of the bytes, and the rest (the name and kind; each
attribute; the fields after the attributes; all of those as a whole) is looked up by its exact
bytes in a cache of text. Only bytes never seen before are decoded with upb into records
(``telemetry.sidecar.proto``) and encoded by ``telemetry.encoder``, which writes every fragment:
this module writes no JSON of its own. A fragment is kept once it has been seen twice, so unique
values do not fill the cache.

The result is exactly ``telemetry.sidecar.proto.encode_request`` of the parsed message (a test holds
them equal over generated messages and mangled bytes). Whatever this walk does not expect (fields
out of order or repeated, a trace state, a malformed length, bytes upb would reject) hands that
span, or the whole request, to the upb path: ``None`` from ``encode_wire`` means "parse it the
usual way".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from struct import Struct
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from telemetry import encoder
from telemetry.records import ResourceGroup, ScopeGroup
from telemetry.sidecar.proto import (
    Encoded,
    bad_ids,
    pairs,
    resource_group,
    scope_group,
    span_record,
)

__all__ = ["encode_wire"]

_CACHE_LIMIT = 1 << 14
_LARGEST = 1024
"""Fragments longer than this are not cached: the caches stay under ~3 * 16384 * 2 KiB."""
_attribute_texts: dict[bytes, str] = {}
"""Exact bytes of one attribute -> its text."""
_later_texts: dict[bytes, str] = {}
"""Exact bytes of a span's fields after its attributes -> their text."""
_rest_texts: dict[bytes, str] = {}
"""Exact bytes of a span's attributes and later fields -> their text (stage spans repeat)."""
_seen: set[tuple[int, int]] = set()
_heads: dict[bytes, str] = {}
"""Exact bytes of a span's name and kind fields -> their text."""
_groups: dict[tuple[int, bytes], str] = {}
"""Exact bytes of a resource or scope -> the text of its group's head."""
_EMPTY_RESOURCE = encoder.resource_head(ResourceGroup())
_EMPTY_SCOPE = encoder.scope_head(ScopeGroup())
_times = Struct("<xQxQ").unpack_from
"""Both times, when start (tag 0x39) and end (tag 0x41) follow each other as usual."""
_time = Struct("<xQ").unpack_from


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
        ((name, value),) = pairs([KeyValue.FromString(key)])
        text = encoder.encode_attribute(name, value)
        _remember(_attribute_texts, key, text)
    return text


def _later(key: bytes) -> str:
    """The text of a span's fields after its attributes, from their bytes."""
    text = _later_texts.get(key)
    if text is None:
        span = Span.FromString(key)
        if _min_field(key) <= 9:
            raise _Unexpected  # an early field again (even at its default), or attributes after others
        text = encoder.span_later(span_record(span))
        _remember(_later_texts, key, text)
    return text


def _min_field(data: bytes) -> int:
    """The lowest field number among the fields in ``data`` (a span's bytes upb has parsed)."""
    lowest = 1 << 29
    pos = 0
    while pos < len(data):
        tag, pos = _varint(data, pos)
        lowest = min(lowest, tag >> 3)
        kind = tag & 7
        if kind == 0:
            _, pos = _varint(data, pos)
        elif kind == 1:
            pos += 8
        elif kind == 2:
            size, pos = _varint(data, pos)
            pos += size
        elif kind == 5:
            pos += 4
        else:
            raise _Unexpected  # groups: upb took them, this walk does not
    return lowest


def _head(key: bytes) -> str:
    """``span_head`` from the bytes of a span's name and kind fields."""
    text = _heads.get(key)
    if text is None:
        span = Span.FromString(key)
        text = encoder.span_head(span.name, span.kind)
        if len(_heads) < _CACHE_LIMIT:
            _heads[key] = text
    return text


def _span_text(data: bytes, hexed: str, pos: int, end: int) -> str | None:
    """One span's text from its bytes ``data[pos:end]`` (``hexed`` is ``data.hex()``);
    ``None`` when its ids are malformed."""
    start = pos
    if data[pos] != 0x0A or data[pos + 1] != 16 or data[pos + 18] != 0x12 or data[pos + 19] != 8:
        return _slow_span(data, start, end)
    at = 2 * pos
    trace_id = hexed[at + 4 : at + 36]
    span_id = hexed[at + 40 : at + 56]
    pos += 28
    parent = ""
    if pos < end and data[pos] == 0x22:  # parent_span_id
        if data[pos + 1] != 8:
            return _slow_span(data, start, end)
        parent = hexed[2 * pos + 4 : 2 * pos + 20]
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
    name = ""
    if pos > head:
        key = data[head:pos]
        name = _heads.get(key) or _head(key)
    begin = finish = 0
    if pos < end and data[pos] == 0x39:  # start_time_unix_nano
        if pos + 9 < end and data[pos + 9] == 0x41:  # end_time_unix_nano
            begin, finish = _times(data, pos)
            pos += 18
        else:
            (begin,) = _time(data, pos)
            pos += 9
    elif pos < end and data[pos] == 0x41:
        (finish,) = _time(data, pos)
        pos += 9
    if pos > end:
        raise _Unexpected
    rest = data[pos:end]
    tail = _rest_texts.get(rest)
    if tail is None:
        try:
            tail = _rest(data, pos, end)
        except _Unexpected:
            return _slow_span(data, start, end)
        _remember(_rest_texts, rest, tail)
    return encoder.join_span(trace_id, span_id, parent, name, begin, finish, tail)


def _rest(data: bytes, pos: int, end: int) -> str:
    """The text of a span's attributes and later fields (``data[pos:end]``), closing brace included."""
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
    later = _later(data[pos:end]) if pos < end else encoder.span_later(_NO_SPAN)
    return encoder.span_tail(parts, later)


_NO_SPAN = span_record(Span())
"""A span with nothing after its attributes (``span_later`` of it: the empty status, the brace)."""


def _slow_span(data: bytes, start: int, end: int) -> str | None:
    span = Span.FromString(data[start:end])
    return None if bad_ids(span) else encoder.encode_span(span_record(span))


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


def _group_head(
    found: tuple[int, int] | None, data: bytes, cls: Any, make: Callable[[Any], str], empty: str
) -> str:
    """The head text of a resource or scope group, remembered by the group's bytes (decoded even
    when unused: upb would refuse a corrupt one, so must this)."""
    if found is None:
        return empty
    key = (id(cls), data[found[0] : found[1]])
    text = _groups.get(key)
    if text is None:
        text = make(cls.FromString(key[1]))
        if len(_groups) >= _CACHE_LIMIT:
            _groups.clear()
        _groups[key] = text
    return text


def _resource_head(resource: Any) -> str:
    return encoder.resource_head(resource_group(resource))


def _scope_head(scope: Any) -> str:
    return encoder.scope_head(scope_group(scope))


def _schema(found: tuple[int, int] | None, data: bytes) -> str:
    return "" if found is None else data[found[0] : found[1]].decode("utf-8")


def _encode(data: bytes) -> Encoded:
    groups: list[str] = []
    spans = rejected = 0
    error = ""
    hexed = data.hex()
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
                        else _span_text(data, hexed, start, end)
                    )
                    if text is None:
                        rejected += 1
                        error = error or bad_ids(Span.FromString(data[start:end]))
                    else:
                        texts.append(text)
                elif kind == 1 and scope is None:
                    scope = (start, end)
                elif kind == 3 and scope_schema is None:
                    scope_schema = (start, end)
                else:
                    raise _Unexpected
            head = _group_head(scope, data, InstrumentationScope, _scope_head, _EMPTY_SCOPE)
            url = _schema(scope_schema, data)
            if texts:
                spans += len(texts)
                scope_groups.append(encoder.join_scope(head, texts, url))
        head = _group_head(resource, data, Resource, _resource_head, _EMPTY_RESOURCE)
        url = _schema(group_schema, data)
        if scope_groups:
            groups.append(encoder.join_resource(head, scope_groups, url))
    line = encoder.join_request(groups) if groups else ""
    return Encoded(line, spans, rejected, error)
