"""The sidecar's fast encoders make exactly the line the generic protobuf path makes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from telemetry import SpanFileWriter, configure
from telemetry._otlp_json import NotCanonical, pass_through
from telemetry._otlp_proto import Encoded, encode_message, encode_request
from telemetry._otlp_wire import encode_wire
from telemetry.otlpjson import parse_request, request_to_json
from telemetry.sidecar import TraceReceiver

from .conftest import KEY, make_call

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_ID_SIZES = {"trace_id": 16, "span_id": 8, "parent_span_id": 8}


def _scalar(field: Any, good_ids: bool) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return _TEXT
    if kind == FieldDescriptor.TYPE_BYTES:
        if field.name in _ID_SIZES and good_ids:
            return st.binary(min_size=_ID_SIZES[field.name], max_size=_ID_SIZES[field.name])
        return st.binary(max_size=20)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=64)
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.integers(0, 7)
    if kind in (
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_SFIXED64,
        FieldDescriptor.TYPE_SINT64,
    ):
        return st.integers(-(2**63), 2**63 - 1)
    if kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        return st.integers(0, 2**64 - 1)
    if kind in (
        FieldDescriptor.TYPE_INT32,
        FieldDescriptor.TYPE_SINT32,
        FieldDescriptor.TYPE_SFIXED32,
    ):
        return st.integers(-(2**31), 2**31 - 1)
    return st.integers(0, 2**32 - 1)


@st.composite
def messages(draw: st.DrawFn, cls: Any, depth: int = 0, good_ids: bool = True) -> Any:
    """Any message of ``cls``: each field set or not, oneofs respected, nesting bounded."""
    message = cls()
    chosen_oneofs: set[str] = set()
    for field in cls.DESCRIPTOR.fields:
        if field.containing_oneof is not None:
            if field.containing_oneof.name in chosen_oneofs or not draw(st.booleans()):
                continue
        elif not draw(st.booleans()):
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth > 3:
                continue
            sub = field.message_type._concrete_class
            if field.is_repeated:
                items = draw(st.lists(messages(sub, depth + 1, good_ids), max_size=3))
                getattr(message, field.name).extend(items)
            else:
                getattr(message, field.name).CopyFrom(draw(messages(sub, depth + 1, good_ids)))
        elif field.is_repeated:
            getattr(message, field.name).extend(
                draw(st.lists(_scalar(field, good_ids), max_size=3))
            )
        else:
            setattr(message, field.name, draw(_scalar(field, good_ids)))
        if field.containing_oneof is not None:
            chosen_oneofs.add(field.containing_oneof.name)
    return message


def _only_good(message: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``message`` without malformed spans and without groups left empty (what a line holds)."""
    kept = ExportTraceServiceRequest()
    for resource_spans in message.resource_spans:
        group = type(resource_spans)()
        group.CopyFrom(resource_spans)
        del group.scope_spans[:]
        for scope_spans in resource_spans.scope_spans:
            spans = [
                span for span in scope_spans.spans
                if len(span.trace_id) == 16 and len(span.span_id) == 8
                and len(span.parent_span_id) in (0, 8)
            ]  # fmt: skip
            if spans:
                scope = group.scope_spans.add()
                scope.CopyFrom(scope_spans)
                del scope.spans[:]
                scope.spans.extend(spans)
        if group.scope_spans:
            kept.resource_spans.append(group)
    return kept


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class TestProtoEncoder:
    @_SETTINGS
    @given(messages(ExportTraceServiceRequest))
    def test_same_text_as_message_to_dict(self, message: ExportTraceServiceRequest) -> None:
        """Any message, every field of the schema: the walker's text equals request_to_json's."""
        assert encode_message(message) == request_to_json(message)
        encoded = encode_request(message)
        kept = _only_good(message)
        assert encoded.line == (request_to_json(kept) if kept.resource_spans else "")

    @_SETTINGS
    @given(messages(ExportTraceServiceRequest, good_ids=False))
    def test_bad_spans_are_counted_not_written(self, message: ExportTraceServiceRequest) -> None:
        """Spans with ids of the wrong length are left out and counted; the good ones are kept."""
        encoded = encode_request(message)
        total = sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
        assert encoded.spans + encoded.rejected == total
        kept = _only_good(message)
        assert encoded.line == (request_to_json(kept) if kept.resource_spans else "")
        assert bool(encoded.error) == bool(encoded.rejected)


@pytest.fixture(scope="module")
def json_receiver(tmp_path_factory: pytest.TempPathFactory) -> TraceReceiver:
    return TraceReceiver(SpanFileWriter(tmp_path_factory.mktemp("json")))


def _lines(encoded: Encoded) -> Any:
    return json.loads(encoded.line) if encoded.line else None


def _span_groups(line: str) -> Any:
    """A line as the sidecar stores it: groups without spans (a trail's chain record) left out."""
    data = json.loads(line)
    data["resourceSpans"] = [group for group in data["resourceSpans"] if group.get("scopeSpans")]
    return data


class TestJSONPassThrough:
    @_SETTINGS
    @given(messages(ExportTraceServiceRequest, good_ids=False))
    def test_json_gives_the_line_protobuf_gives(
        self, json_receiver: TraceReceiver, message: ExportTraceServiceRequest
    ) -> None:
        """Any message sent as OTLP/JSON is stored as the same spans as sent as protobuf."""
        body = request_to_json(message).encode()
        expected = encode_request(message)
        got = json_receiver.decode_json(body)
        assert (got.spans, got.rejected) == (expected.spans, expected.rejected)
        assert _lines(got) == _lines(expected)
        try:
            passed = pass_through(body)
        except NotCanonical:
            return
        assert _lines(passed) == _lines(expected)

    def test_callgate_lines_pass_through(self, tmp_path: Path) -> None:
        """The trail's own lines (what callgate clients send as JSON) take the fast path, spans unchanged."""
        handle = configure(trail_dir=tmp_path, masking_key=KEY, metrics=False)
        for _ in range(3):
            handle.observer.call_ended(*make_call())
        handle.shutdown()
        for path in tmp_path.glob("*.jsonl"):
            for line in path.read_text().splitlines():
                assert _lines(pass_through(line)) == _span_groups(line)

    def test_non_canonical_forms_are_sent_the_long_way(self) -> None:
        """Enum names, numbers for 64-bit integers, default values and unknown fields are not passed."""
        span = '{"traceId":"' + "ab" * 16 + '","spanId":"' + "cd" * 8 + '"%s}'
        for extra in (
            ',"kind":"SPAN_KIND_SERVER"',
            ',"startTimeUnixNano":5',
            ',"name":""',
            ',"surprise":1',
            ',"status":{"code":0}',
            ',"droppedEventsCount":0',
        ):
            body = '{"resourceSpans":[{"scopeSpans":[{"spans":[' + span % extra + "]}]}]}"
            try:
                pass_through(body)
            except NotCanonical:
                continue
            raise AssertionError(f"{extra} passed through")

    def test_not_json_is_a_value_error(self) -> None:
        """Bodies that are not JSON (or nest past the parser) raise ValueError, never crash."""
        for body in (b"{not json", b"[" * 100_000, b'{"a": NaN}', b"\xff\xfe"):
            try:
                pass_through(body)
            except ValueError:
                continue
            except NotCanonical:
                continue
            raise AssertionError(body[:20])


def _wire_matches(body: bytes) -> Encoded | None:
    """``encode_wire(body)``, checked against upb + ``encode_request`` on the same bytes."""
    got = encode_wire(body)
    try:
        message = ExportTraceServiceRequest.FromString(body)
    except DecodeError:
        assert got is None, "the wire walk took bytes upb refuses"
        return None
    if got is not None:
        assert got == encode_request(message)
    return got


class TestWireEncoder:
    @_SETTINGS
    @given(messages(ExportTraceServiceRequest, good_ids=False))
    def test_same_line_as_the_message_path(self, message: ExportTraceServiceRequest) -> None:
        """Any request's bytes give the line encode_request gives, or are handed to upb."""
        body = message.SerializeToString()
        _wire_matches(body)
        _wire_matches(body + body)  # concatenated messages merge: repeated fields append

    @_SETTINGS
    @given(
        messages(ExportTraceServiceRequest),
        st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    )
    def test_mangled_bytes(
        self, message: ExportTraceServiceRequest, edits: list[tuple[int, int]]
    ) -> None:
        """Bytes with some changed: never a line upb would not make, never an exception."""
        body = bytearray(message.SerializeToString())
        for where, value in edits:
            if body:
                body[where % len(body)] = value
        _wire_matches(bytes(body))
        _wire_matches(bytes(body[: len(body) // 2]))

    def test_callgate_requests_take_the_wire_path(self, tmp_path: Path) -> None:
        """The trail's own spans, sent twice (caches warm), are encoded without upb, identically."""
        handle = configure(trail_dir=tmp_path, masking_key=KEY, metrics=False)
        for _ in range(4):
            handle.observer.call_ended(*make_call())
        handle.shutdown()
        lines = [line for p in tmp_path.glob("*.jsonl") for line in p.read_text().splitlines()]
        for _ in range(2):
            for line in lines:
                body = parse_request(line).SerializeToString()
                got = _wire_matches(body)
                assert got is not None
                assert json.loads(got.line) == _span_groups(line)

    def test_duplicate_and_reordered_fields_follow_protobuf(self) -> None:
        """A field sent twice (last wins) or out of order gives what upb makes of it."""
        span = Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="first", kind=2)
        span.attributes.add(key="k", value=AnyValue(string_value="v"))
        again = Span(name="second", trace_id=b"u" * 16).SerializeToString()
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
        )
        body = request.SerializeToString()
        inner = span.SerializeToString()
        for mangled in (inner + again, again + inner, inner[28:] + inner[:28]):
            scope = b"\x12" + bytes([len(mangled)]) + mangled
            group = b"\x12" + bytes([len(scope)]) + scope
            body = b"\x0a" + bytes([len(group)]) + group
            got = encode_wire(body)
            expected = encode_request(ExportTraceServiceRequest.FromString(body))
            assert got is None or got == expected
