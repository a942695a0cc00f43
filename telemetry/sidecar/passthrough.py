"""OTLP/HTTP JSON requests already in the file exporter's form: checked, then passed through.

Most OTLP/JSON clients (callgate's own trail lines, the Collector, other sidecars) send exactly the
form the file exporter writes: camelCase names, lowercase hex ids, 64-bit integers as decimal
strings, enums as integers, no default-valued fields. For such a request the protobuf round trip
(``ParseDict`` then ``MessageToDict``) changes nothing, so ``pass_through`` checks the parsed JSON
against that form in one walk and writes it back compactly. Both ends go through ``orjson``
(a quarter of the time of the standard library's ``json`` on a 512-span request); whatever
``orjson`` refuses to read is read by ``json`` instead, with its error messages and its treatment
of integers beyond 64 bits, and a request that carries a double is written by ``json`` so the
number is spelled as the protobuf path spells it.

A span whose ids are not hex of the right length is left out and counted (partial success). Any
other departure from the canonical form (enum names, snake_case names, numbers for 64-bit integers,
unknown fields, default values spelled out, non-finite doubles) makes ``pass_through`` return
``None``: the caller takes the general path through the protobuf message, which normalizes the
request or rejects it. Either way the line written is the same.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

import orjson

from telemetry.sidecar.proto import Encoded

__all__ = ["NotCanonical", "pass_through"]

_HEX = frozenset("0123456789abcdef")
_INT64 = 1 << 63
_UINT64 = 1 << 64
_UINT32 = 1 << 32


class NotCanonical(Exception):
    """The request is valid JSON but not in the file exporter's form."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _hex_id(value: Any, size: int) -> bool:
    """Whether ``value`` is ``size`` bytes as lowercase hex. Raises ``NotCanonical`` for non-strings."""
    if type(value) is not str:
        raise NotCanonical
    return len(value) == 2 * size and _HEX.issuperset(value)


def _string(value: Any) -> None:
    if type(value) is not str or not value:
        raise NotCanonical


def _count(value: Any) -> None:
    """A uint32 that is set (a zero would have been left out)."""
    if type(value) is not int or not 0 < value < _UINT32:
        raise NotCanonical


def _decimal(value: Any, low: int, high: int) -> None:
    """A 64-bit integer as its canonical decimal string, not zero (zero would be left out)."""
    if type(value) is not str or not value or len(value) > 20:
        raise NotCanonical
    digits = value[1:] if value[0] == "-" else value
    if not digits.isascii() or not digits.isdigit() or digits[0] == "0":
        raise NotCanonical
    if not low <= int(value) < high:
        raise NotCanonical


def _any_value(value: Any) -> None:
    if type(value) is not dict or len(value) > 1:
        raise NotCanonical
    for key, item in value.items():
        if key == "stringValue":
            if type(item) is not str:
                raise NotCanonical
        elif key == "boolValue":
            if type(item) is not bool:
                raise NotCanonical
        elif key == "intValue":
            if item != "0":
                _decimal(item, -_INT64, _INT64)
        elif key == "doubleValue":
            if type(item) is not float or not math.isfinite(item):
                raise NotCanonical
        elif key in ("arrayValue", "kvlistValue"):
            if type(item) is not dict:
                raise NotCanonical
            for name, values in item.items():
                if name != "values" or type(values) is not list or not values:
                    raise NotCanonical
                if key == "arrayValue":
                    for entry in values:
                        _any_value(entry)
                else:
                    _attributes(values)
        elif key == "bytesValue":
            if type(item) is not str:
                raise NotCanonical
            try:
                if base64.b64encode(base64.b64decode(item, validate=True)).decode() != item:
                    raise NotCanonical
            except binascii.Error as error:
                raise NotCanonical from error
        else:
            raise NotCanonical


def _attributes(values: Any) -> None:
    if type(values) is not list or not values:
        raise NotCanonical
    for pair in values:
        if type(pair) is not dict or len(pair) != 2:
            raise NotCanonical
        key = pair.get("key")
        value = pair.get("value")
        if type(key) is not str or not key or value is None:
            raise NotCanonical  # a null value is not canonical either: it would be left out
        if type(value) is dict and len(value) == 1 and type(value.get("stringValue")) is str:
            continue  # most values are text: checked here, without a call
        _any_value(value)


def _dropped_and_attributes(item: dict[str, Any], allowed: frozenset[str]) -> None:
    for key, value in item.items():
        if key == "attributes":
            _attributes(value)
        elif key == "droppedAttributesCount":
            _count(value)
        elif key not in allowed:
            raise NotCanonical


_RESOURCE: frozenset[str] = frozenset()
_SCOPE = frozenset({"name", "version"})
_EVENT = frozenset({"timeUnixNano", "name"})
_LINK = frozenset({"traceId", "spanId", "traceState", "flags"})


def _scope(scope: Any) -> None:
    if type(scope) is not dict:
        raise NotCanonical
    _dropped_and_attributes(scope, _SCOPE)
    for key in ("name", "version"):
        if key in scope:
            _string(scope[key])


def _span_ok(span: Any) -> bool:
    """Whether ``span`` is canonical with good ids; ``False`` for bad ids (the span is rejected)."""
    if type(span) is not dict:
        raise NotCanonical
    good = _hex_id(span.get("traceId"), 16) and _hex_id(span.get("spanId"), 8)
    for key, value in span.items():
        if key in ("traceId", "spanId"):
            continue
        if key == "parentSpanId":
            good = _hex_id(value, 8) and good
        elif key == "name" or key == "traceState":
            _string(value)
        elif key == "kind":
            if type(value) is not int or not 0 < value <= 5:
                raise NotCanonical
        elif key == "startTimeUnixNano" or key == "endTimeUnixNano":
            _decimal(value, 0, _UINT64)
        elif key == "attributes":
            _attributes(value)
        elif key in ("droppedAttributesCount", "droppedEventsCount", "droppedLinksCount", "flags"):
            _count(value)
        elif key == "status":
            if type(value) is not dict:
                raise NotCanonical
            for name, item in value.items():
                if name == "message":
                    _string(item)
                elif name == "code":
                    if type(item) is not int or not 0 < item <= 2:
                        raise NotCanonical
                else:
                    raise NotCanonical
        elif key == "events":
            if type(value) is not list or not value:
                raise NotCanonical
            for event in value:
                if type(event) is not dict:
                    raise NotCanonical
                _dropped_and_attributes(event, _EVENT)
                if "timeUnixNano" in event:
                    _decimal(event["timeUnixNano"], 0, _UINT64)
                if "name" in event:
                    _string(event["name"])
        elif key == "links":
            if type(value) is not list or not value:
                raise NotCanonical
            for link in value:
                if type(link) is not dict:
                    raise NotCanonical
                _dropped_and_attributes(link, _LINK)
                # A link's ids are not checked for length (as on the protobuf path); hex only.
                for name, size in (("traceId", 16), ("spanId", 8)):
                    if name in link and not (
                        type(link[name]) is str
                        and link[name]
                        and _HEX.issuperset(link[name])
                        and len(link[name]) % 2 == 0
                        and len(link[name]) <= 2 * size
                    ):
                        raise NotCanonical
                if "traceState" in link:
                    _string(link["traceState"])
                if "flags" in link:
                    _count(link["flags"])
        else:
            raise NotCanonical
    return good


def _loads(body: bytes | str) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass  # not JSON, or JSON orjson does not take (a lone surrogate, an int beyond 64 bits)
    try:
        return json.loads(body, parse_constant=_reject_constant)
    except RecursionError as error:
        raise ValueError("JSON nests too deep") from error


def _dumps(data: Any, body: bytes | str) -> str:
    """``data`` as compact JSON text, non-ASCII as is; a double as ``json`` spells it."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    # Canonical requests hold floats only under "doubleValue": a key spelled with those letters,
    # or with backslash-u escapes.
    if b"doubleValue" not in body and b"\\u" not in body:
        try:
            return orjson.dumps(data).decode("utf-8")
        except orjson.JSONEncodeError:
            pass  # a lone surrogate read by json from a str body: json writes it, the caller refuses
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), check_circular=False)


def pass_through(body: bytes | str) -> Encoded:
    """The request as a line, when it is canonical OTLP JSON; raises ``NotCanonical`` when not.

    Raises ``ValueError`` when ``body`` is not JSON at all (or nests too deep to parse).
    """
    data = _loads(body)
    if type(data) is not dict:
        raise ValueError("an OTLP JSON request is an object")
    spans = rejected = 0
    groups = data.get("resourceSpans")
    if len(data) != (0 if groups is None else 1):
        raise NotCanonical
    try:
        if groups is None:
            return Encoded("", 0, 0)
        if type(groups) is not list or not groups:
            raise NotCanonical
        kept_groups = []
        for group in groups:
            if type(group) is not dict:
                raise NotCanonical
            kept_scopes = []
            for key, value in group.items():
                if key == "resource":
                    if type(value) is not dict:
                        raise NotCanonical
                    _dropped_and_attributes(value, _RESOURCE)
                elif key == "schemaUrl":
                    _string(value)
                elif key != "scopeSpans":
                    raise NotCanonical
            scopes = group.get("scopeSpans")
            if scopes is None:
                continue
            if type(scopes) is not list or not scopes:
                raise NotCanonical
            for scope_spans in scopes:
                if type(scope_spans) is not dict:
                    raise NotCanonical
                for key, value in scope_spans.items():
                    if key == "scope":
                        _scope(value)
                    elif key == "schemaUrl":
                        _string(value)
                    elif key != "spans":
                        raise NotCanonical
                items = scope_spans.get("spans")
                if items is None:
                    continue
                if type(items) is not list or not items:
                    raise NotCanonical
                kept = [span for span in items if _span_ok(span)]
                rejected += len(items) - len(kept)
                if kept:
                    spans += len(kept)
                    if len(kept) != len(items):
                        scope_spans["spans"] = kept
                    kept_scopes.append(scope_spans)
            if kept_scopes:
                if len(kept_scopes) != len(scopes):
                    group["scopeSpans"] = kept_scopes
                kept_groups.append(group)
    except RecursionError as deep:
        raise NotCanonical from deep
    if not kept_groups:
        return Encoded("", 0, rejected, "trace_id must be 16 bytes and span_id 8 bytes")
    data["resourceSpans"] = kept_groups
    line = _dumps(data, body)
    why = "trace_id must be 16 bytes and span_id 8 bytes" if rejected else ""
    return Encoded(line, spans, rejected, why)
