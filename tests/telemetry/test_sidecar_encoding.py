"""The sidecar writes the one encoder's text: its wire reader makes exactly the records path's line."""

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
from telemetry.otlpjson import parse_request, request_to_json, request_to_line
from telemetry.sidecar import Ingest, OTLPReceiver
from telemetry.sidecar.passthrough import NotCanonical, pass_through
from telemetry.sidecar.proto import Encoded, encode_request
from telemetry.sidecar.wire import encode_wire

from .conftest import KEY, make_call
from .test_encoder import normal

_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_ID_SIZES = {"trace_id": 16, "span_id": 8, "parent_span_id": 8}
_NOT_CARRIED = frozenset({"key_strindex", "string_value_strindex", "entity_refs"})
"""Fields the records do not carry (profiles' string-table indexes, in-development entity refs)."""


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
        if field.name in _NOT_CARRIED:
            continue
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


def _same_message(line: str, message: ExportTraceServiceRequest) -> bool:
    """Whether ``line`` parses back to ``message`` (fields at their defaults aside)."""
    if not line:
        return not message.resource_spans
    return bool(
        normal(json.loads(request_to_json(parse_request(line))))
        == normal(json.loads(request_to_json(message)))
    )


class TestMessagePath:
    @_SETTINGS
    @given(messages(ExportTraceServiceRequest))
    def test_the_one_encoders_text(self, message: ExportTraceServiceRequest) -> None:
        """Any message, every carried field of the schema: request_to_line's text, parsing back to it."""
        encoded = encode_request(message)
        kept = _only_good(message)
        assert encoded.line == (request_to_line(kept) if kept.resource_spans else "")
        assert _same_message(encoded.line, kept)

    @_SETTINGS
    @given(messages(ExportTraceServiceRequest, good_ids=False))
    def test_bad_spans_are_counted_not_written(self, message: ExportTraceServiceRequest) -> None:
        """Spans with ids of the wrong length are left out and counted; the good ones are kept."""
        encoded = encode_request(message)
        total = sum(len(s.spans) for r in message.resource_spans for s in r.scope_spans)
        assert encoded.spans + encoded.rejected == total
        kept = _only_good(message)
        assert encoded.line == (request_to_line(kept) if kept.resource_spans else "")
        assert bool(encoded.error) == bool(encoded.rejected)

    def test_error_says_which_id(self) -> None:
        """The first rejected span's fault is the error text: short ids, or a short parent."""
        good = Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="ok")
        short = Span(trace_id=b"t" * 16, span_id=b"s" * 8, parent_span_id=b"p" * 3)
        for spans, error in (
            (
                [good, Span(trace_id=b"t", span_id=b"s" * 8)],
                "trace_id must be 16 bytes and span_id 8 bytes",
            ),
            ([short, good], "parent_span_id must be 8 bytes"),
        ):
            request = ExportTraceServiceRequest(
                resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
            )
            expected = Encoded(request_to_line(_only_good(request)), 1, 1, error)
            assert encode_request(request) == expected
            assert encode_wire(request.SerializeToString()) == expected


@pytest.fixture(scope="module")
def json_receiver(tmp_path_factory: pytest.TempPathFactory) -> Ingest:
    return Ingest(SpanFileWriter(tmp_path_factory.mktemp("json")))


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
        self, json_receiver: Ingest, message: ExportTraceServiceRequest
    ) -> None:
        """Any message sent as OTLP/JSON is stored as the same spans as sent as protobuf.

        The same object, but for empty ``status``/``resource``/``scope`` objects: the encoder
        always writes them, a passed-through request has them only where its sender wrote them.
        """
        body = request_to_json(message).encode()
        expected = encode_request(message)
        got = json_receiver.decode_json(body)
        assert (got.spans, got.rejected) == (expected.spans, expected.rejected)
        assert normal(_lines(got)) == normal(_lines(expected))
        try:
            passed = pass_through(body)
        except NotCanonical:
            assert got == expected  # the long way is the protobuf path's line, byte for byte
            return
        assert normal(_lines(passed)) == normal(_lines(expected))

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


def _unchained(line: str) -> str:
    """A stored line without the resource group the file writer's chain appends (its text cut off)."""
    return line[: line.rindex(',{"resource":{"attributes":[{"key":"callgate.chain"')] + "]}"


class TestSidecarWritesEncoderText:
    def test_grpc_line_from_the_sdk_exporter(self, tmp_path: Path) -> None:
        """A request from the real OTel SDK gRPC exporter is stored as the encoder's text of its spans."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.trace import Link, Status, StatusCode

        server = OTLPReceiver(SpanFileWriter(tmp_path), grpc_port=0, http_port=None).start()
        try:
            provider = TracerProvider(resource=Resource.create({"service.name": "encoder-test"}))
            memory = InMemorySpanExporter()
            exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{server.grpc_port}", insecure=True)
            provider.add_span_processor(SimpleSpanProcessor(memory))
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tracer = provider.get_tracer("encoder.test", "1.2")
            with tracer.start_as_current_span("root", attributes={"n": 1, "f": 0.5}) as root:
                root.add_event("retry", {"attempt": 2, "tags": ["a", "b"]})
                with tracer.start_as_current_span(
                    "child", links=[Link(root.get_span_context(), {"why": "x"})]
                ) as child:
                    child.set_status(Status(StatusCode.ERROR, "boom"))
            provider.shutdown()
        finally:
            server.stop()
        stored = [
            _unchained(line)
            for p in tmp_path.glob("*.jsonl")
            for line in p.read_text().splitlines()
        ]
        expected = [request_to_line(encode_spans([span])) for span in memory.get_finished_spans()]
        assert len(expected) == 2
        assert sorted(stored) == sorted(expected)
        assert all('"flags":' in line for line in stored)  # the SDK sets them: field 16, last
