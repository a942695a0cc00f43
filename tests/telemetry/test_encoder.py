"""One span encoder: what the sidecar receives, encoded by the trail's encoder, equals protobuf's JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from telemetry import configure, parse_request, request_to_json
from telemetry.encoder import encode_span
from telemetry.otlpjson import request_to_line
from telemetry.records import EventRecord, LinkRecord, SpanRecord
from telemetry.sidecar.proto import encode_request
from telemetry.sidecar.wire import encode_wire

from .conftest import KEY, make_call

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
U64 = st.integers(0, 2**64 - 1)


def any_value(depth: int = 2) -> st.SearchStrategy[AnyValue]:
    leaves = st.one_of(
        st.builds(lambda v: AnyValue(string_value=v), TEXT),
        st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
        st.builds(lambda v: AnyValue(int_value=v), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda v: AnyValue(double_value=v), st.floats(allow_nan=False)),
        st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=8)),
        st.just(AnyValue()),
    )
    if depth == 0:
        return leaves
    inner = any_value(depth - 1)
    return st.one_of(
        leaves,
        st.builds(lambda vs: _array(vs), st.lists(inner, max_size=3)),
        st.builds(lambda kv: _kvlist(kv), st.lists(st.tuples(TEXT, inner), max_size=3)),
    )


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.SetInParent()
    value.array_value.values.extend(values)
    return value


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.SetInParent()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in pairs)
    return value


ATTRIBUTES = st.lists(
    st.builds(lambda k, v: KeyValue(key=k, value=v), TEXT, any_value()), max_size=4
)
IDS = st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8)


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(0, 2))):
        resource_spans = request.resource_spans.add()
        if draw(st.booleans()):
            resource_spans.resource.attributes.extend(draw(ATTRIBUTES))
            resource_spans.resource.dropped_attributes_count = draw(st.integers(0, 3))
        resource_spans.schema_url = draw(TEXT)
        for _ in range(draw(st.integers(0, 2))):
            scope_spans = resource_spans.scope_spans.add()
            if draw(st.booleans()):
                scope_spans.scope.name = draw(TEXT)
                scope_spans.scope.version = draw(TEXT)
                scope_spans.scope.attributes.extend(draw(ATTRIBUTES))
            for _ in range(draw(st.integers(0, 3))):
                span = scope_spans.spans.add()
                span.trace_id = draw(IDS[0])
                span.span_id = draw(IDS[1])
                if draw(st.booleans()):
                    span.parent_span_id = draw(IDS[1])
                span.trace_state = draw(TEXT)
                span.flags = draw(st.integers(0, 2**32 - 1))
                span.name = draw(TEXT)
                span.kind = draw(st.integers(0, 5))  # type: ignore[assignment]
                span.start_time_unix_nano = draw(U64)
                span.end_time_unix_nano = draw(U64)
                span.attributes.extend(draw(ATTRIBUTES))
                span.dropped_attributes_count = draw(st.integers(0, 3))
                for _ in range(draw(st.integers(0, 2))):
                    event = span.events.add()
                    event.time_unix_nano = draw(U64)
                    event.name = draw(TEXT)
                    event.attributes.extend(draw(ATTRIBUTES))
                    event.dropped_attributes_count = draw(st.integers(0, 3))
                for _ in range(draw(st.integers(0, 2))):
                    link = span.links.add()
                    link.trace_id = draw(IDS[0])
                    link.span_id = draw(IDS[1])
                    link.trace_state = draw(TEXT)
                    link.attributes.extend(draw(ATTRIBUTES))
                    link.flags = draw(st.integers(0, 2**32 - 1))
                span.dropped_events_count = draw(st.integers(0, 3))
                span.dropped_links_count = draw(st.integers(0, 3))
                if draw(st.booleans()):
                    span.status.code = draw(st.integers(0, 2))  # type: ignore[assignment]
                    span.status.message = draw(TEXT)
    return request


def normal(data: Any) -> Any:
    """Empty messages (status, scope, resource) are written by one encoder and left out by the other."""
    if isinstance(data, dict):
        return {
            key: normal(value)
            for key, value in data.items()
            if not (key in ("status", "scope", "resource", "value") and value == {})
            and not (key == "resourceSpans" and value == [])
        }
    if isinstance(data, list):
        return [normal(item) for item in data]
    return data


class TestOneEncoder:
    """request_to_line (the records encoder) writes what protobuf's JSON mapping writes."""

    @settings(max_examples=200, deadline=None)
    @given(request=requests())
    def test_same_as_protobuf(self, request: ExportTraceServiceRequest) -> None:
        """For any request, the line parses back to the same message (fields at their defaults aside)."""
        line = request_to_line(request)
        assert normal(json.loads(request_to_json(parse_request(line)))) == normal(
            json.loads(request_to_json(request))
        )

    def test_nan_and_infinity(self) -> None:
        """Doubles JSON cannot hold are written as proto3's strings."""
        request = ExportTraceServiceRequest()
        span = request.resource_spans.add().scope_spans.add().spans.add()
        span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
        for key, number in (("nan", float("nan")), ("inf", float("inf")), ("ninf", float("-inf"))):
            span.attributes.add(key=key, value=AnyValue(double_value=number))
        values = json.loads(request_to_line(request))["resourceSpans"][0]["scopeSpans"][0]["spans"][
            0
        ]
        assert [a["value"]["doubleValue"] for a in values["attributes"]] == [
            "NaN",
            "Infinity",
            "-Infinity",
        ]
        parse_request(request_to_line(request))


class TestOneLayout:
    """Every path writes the same text for the same spans, fields in field-number order."""

    def test_field_number_order(self) -> None:
        """A span's keys come in the order of their protobuf field numbers, flags (16) last."""
        span = SpanRecord(
            trace_id="ab" * 16, span_id="cd" * 8, parent_span_id="ef" * 8, trace_state="k=v",
            name="n", kind=2, start_ns=1, end_ns=2, attributes=[("a", 1)],
            dropped_attributes_count=1, events=[EventRecord(
                name="e", time_ns=3, attributes=[("b", True)], dropped_attributes_count=4
            )], dropped_events_count=1, links=[LinkRecord(trace_id="01" * 16, span_id="02" * 8)],
            dropped_links_count=1, status_code=2, status_message="m", flags=257,
        )  # fmt: skip
        data = json.loads(encode_span(span))
        assert list(data) == [
            "traceId", "spanId", "traceState", "parentSpanId", "name", "kind",
            "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
            "events", "droppedEventsCount", "links", "droppedLinksCount", "status", "flags",
        ]  # fmt: skip
        assert data["events"] == [
            {
                "timeUnixNano": "3",
                "name": "e",
                "attributes": [{"key": "b", "value": {"boolValue": True}}],
                "droppedAttributesCount": 4,
            }
        ]

    def test_trail_lines_are_request_to_line(self, tmp_path: Path) -> None:
        """A trail line, parsed to protobuf and written again by the sidecar's paths, is the same text."""
        handle = configure(trail_dir=tmp_path, masking_key=KEY, metrics=False)
        for _ in range(3):
            handle.observer.call_ended(*make_call())
        handle.shutdown()
        lines = [line for p in tmp_path.glob("*.jsonl") for line in p.read_text().splitlines()]
        assert lines
        for line in lines:
            request = parse_request(line)
            assert request_to_line(request) == line
            stored = encode_request(request)  # the sidecar's form: the chain's group has no spans
            del request.resource_spans[-1]
            assert stored.line == request_to_line(request)
            for _ in range(3):  # caches cold, then warm
                assert encode_wire(request.SerializeToString()) == stored
