"""The local trail: the Collector's OTLP JSON file format, files per process, rotation, completeness."""

from __future__ import annotations

import base64
import json
import os
import threading
from pathlib import Path

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from telemetry import Masker, SpanFileWriter, TrailSink, configure, encode_spans, parse_request

from .conftest import KEY, make_call, read_spans


def _hex_ids_to_base64(data: object) -> object:
    """The Collector's JSON uses hex ids where protobuf's JSON mapping has base64: convert for Parse."""
    if isinstance(data, dict):
        return {
            key: base64.b64encode(bytes.fromhex(value)).decode()
            if key in ("traceId", "spanId", "parentSpanId")
            else _hex_ids_to_base64(value)
            for key, value in data.items()
        }
    if isinstance(data, list):
        return [_hex_ids_to_base64(item) for item in data]
    return data


def write_calls(directory: Path, count: int, **options: object) -> list[Path]:
    handle = configure(trail_dir=directory, masking_key=KEY, **options)  # type: ignore[arg-type]
    for _ in range(count):
        handle.observer.call_ended(*make_call(retries=1))
    handle.shutdown()
    return handle.trail_files


class TestFormat:
    def test_lines_parse_as_export_trace_service_requests(self, trail_dir: Path) -> None:
        """Every line is an ExportTraceServiceRequest: json_format.Parse accepts it with no unknown field."""
        files = write_calls(trail_dir, 3)
        lines = [line for path in files for line in path.read_text().splitlines()]
        assert lines
        for line in lines:
            request = ExportTraceServiceRequest()
            json_format.Parse(json.dumps(_hex_ids_to_base64(json.loads(line))), request)
            spans = request.resource_spans[0].scope_spans[0].spans
            assert all(len(span.trace_id) == 16 and len(span.span_id) == 8 for span in spans)
            assert request.resource_spans[0].scope_spans[0].scope.name == "callgate.telemetry"

    def test_collector_encoding_details(self, trail_dir: Path) -> None:
        """Hex ids, integer kind and status, 64-bit integers and times as strings."""
        write_calls(trail_dir, 1)
        line = next(trail_dir.glob("*.jsonl")).read_text().splitlines()[0]
        span = json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
        assert len(span["traceId"]) == 32 and int(span["traceId"], 16)
        assert len(span["spanId"]) == 16 and int(span["spanId"], 16)
        assert span["kind"] == 1
        assert isinstance(span["startTimeUnixNano"], str)
        assert {"key": "guard.step", "value": {"intValue": "1"}} in span["attributes"]
        assert {"key": "guard.ok", "value": {"boolValue": True}} in span["attributes"]

    def test_resource_carries_service_name(self, trail_dir: Path) -> None:
        """The resource names the service (OTEL_SERVICE_NAME or the argument)."""
        write_calls(trail_dir, 1, service_name="support-bot")
        line = next(trail_dir.glob("*.jsonl")).read_text().splitlines()[0]
        resource = json.loads(line)["resourceSpans"][0]["resource"]["attributes"]
        assert {"key": "service.name", "value": {"stringValue": "support-bot"}} in resource

    def test_round_trip_through_protobuf(self, trail_dir: Path) -> None:
        """parse_request and request_to_json are inverse: the sidecar writes what the trail writes."""
        from telemetry import request_to_json

        write_calls(trail_dir, 1)
        line = next(trail_dir.glob("*.jsonl")).read_text().splitlines()[0]
        assert json.loads(request_to_json(parse_request(line))) == json.loads(line)

    def test_encoder_is_reusable(self, tmp_path: Path) -> None:
        """encode_spans turns span records into a line analytics and benchmarks can write."""
        from telemetry import build_call_spans

        call, result = make_call()
        line = encode_spans(
            build_call_spans(call, result, Masker(key=KEY)),
            resource={"service.name": "bench"},
            scope_name="callgate.telemetry",
        )
        request = parse_request(line)
        assert len(request.resource_spans[0].scope_spans[0].spans) == 10


class TestFiles:
    def test_one_file_per_process_named_with_pid(self, trail_dir: Path) -> None:
        """The file name carries the process id."""
        files = write_calls(trail_dir, 2)
        assert len(files) == 1
        assert f"-{os.getpid()}-" in files[0].name

    def test_rotation_by_size_keeps_whole_lines(self, trail_dir: Path) -> None:
        """Past max_bytes a new file starts; every file holds only whole JSON lines."""
        writer = SpanFileWriter(trail_dir, max_bytes=20_000)
        sink = TrailSink(writer, Masker(key=KEY), resource={}, batch_size=4)
        for _ in range(200):
            call, result = make_call()
            sink.submit(call, result)
        sink.shutdown()
        assert len(writer.files) > 3
        calls = 0
        for path in writer.files:
            text = path.read_text()
            assert text.endswith("\n")
            for line in text.splitlines():
                calls += sum(
                    span["name"].startswith("execute_tool ")
                    for span in json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]
                )
        assert calls == 200

    def test_flushed_at_shutdown(self, trail_dir: Path) -> None:
        """Calls queued a moment before shutdown are on disk after it."""
        handle = configure(trail_dir=trail_dir, masking_key=KEY)
        handle.observer.call_ended(*make_call())
        handle.shutdown()
        assert len(read_spans(trail_dir)) == 10

    def test_force_flush(self, trail_dir: Path) -> None:
        """force_flush makes everything submitted so far readable without shutting down."""
        handle = configure(trail_dir=trail_dir, masking_key=KEY)
        handle.observer.call_ended(*make_call())
        assert handle.force_flush(5)
        assert len(read_spans(trail_dir)) == 10
        handle.shutdown()


class TestCompleteness:
    def test_a_burst_of_100k_calls_leaves_100k_call_spans(self, trail_dir: Path) -> None:
        """The trail never drops: a burst larger than the queue makes callers wait, and all arrive."""
        writer = SpanFileWriter(trail_dir)
        sink = TrailSink(writer, Masker(key=KEY), resource={}, capacity=2_000, batch_size=256)
        call, result = make_call(stages=("budget", "resolve"), tool="nope", spec=None)

        def burst(count: int) -> None:
            for _ in range(count):
                sink.submit(call, result)

        threads = [threading.Thread(target=burst, args=(25_000,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sink.shutdown()
        assert sink.dropped == 0
        count = 0
        for path in writer.files:
            with path.open() as handle:
                for line in handle:
                    count += line.count('"name":"execute_tool ')
        assert count == 100_000


class TestOneEncoder:
    @pytest.mark.parametrize("check_text", [True, False])
    @pytest.mark.parametrize("parent", [None, ("ab" * 16, "cd" * 8)])
    def test_encode_call_is_encode_span_of_the_records(
        self, check_text: bool, parent: tuple[str, str] | None
    ) -> None:
        """encode_call writes exactly what encode_span makes of build_call_spans' records, for every
        shop path (retries included), twice (the second time from its path's template), with the
        text check on and off (the trail's first try), joined to a host's span or not: only ids
        differ, and they are laid out as the records' are."""
        from guard.testing import ManualClock, RecordingObserver
        from telemetry import build_call_spans, encode_call
        from telemetry.encoder import encode_span

        from .shop_paths import build_guard, drive

        def without_ids(text: str) -> list[dict[str, object]]:
            spans = json.loads("[" + text + "]")
            for span in spans:
                for key in ("traceId", "spanId", "parentSpanId"):
                    span.pop(key, None)
            return spans

        recorder = RecordingObserver()
        clock = ManualClock()
        guard, backend = build_guard(recorder, clock)
        drive(guard, backend, clock)
        masker = Masker(key=KEY)
        for call, result in [*recorder.ended, make_call(retries=2)] * 2:
            fast = encode_call(
                call, result, masker, capture_content=True, parent=parent, check_text=check_text
            )
            records = build_call_spans(call, result, masker, capture_content=True, parent=parent)
            general = ",".join(encode_span(record) for record in records)
            assert without_ids(fast) == without_ids(general)
            assert len(fast) == len(general)  # ids are fixed-width: the text is the same size
            head, *stages = json.loads("[" + fast + "]")
            assert head.get("parentSpanId") == (parent[1] if parent else None)
            traces = {span["traceId"] for span in [head, *stages]}
            assert len(traces) == 1 and (parent is None or traces == {parent[0]})
            assert [span["parentSpanId"] for span in stages] == [head["spanId"]] * len(stages)
            ids = [span["spanId"] for span in [head, *stages]]
            assert len(set(ids)) == len(ids) and len({i[:14] for i in ids}) == 1

    def test_every_shop_path_encodes_as_protobuf_would(self) -> None:
        """For every shop path, twice (the second time from the shared stage-span text), the line
        the trail writes is exactly what protobuf's JSON mapping makes of it."""
        from guard.testing import ManualClock, RecordingObserver
        from telemetry import encode_call, request_to_json

        from .shop_paths import build_guard, drive

        recorder = RecordingObserver()
        clock = ManualClock()
        guard, backend = build_guard(recorder, clock)
        drive(guard, backend, clock)
        masker = Masker(key=KEY)
        assert recorder.ended
        for _ in range(2):
            for call, result in recorder.ended:
                line = encode_spans(
                    [encode_call(call, result, masker, capture_content=True)],
                    resource={"service.name": "shop"},
                    scope_name="callgate.telemetry",
                )
                assert json.loads(request_to_json(parse_request(line))) == json.loads(line)


class TestCompletenessWithTheGuard:
    @pytest.mark.slow
    def test_100k_real_calls_leave_100k_call_spans(self, trail_dir: Path) -> None:
        """100,000 calls through the shop guard, as fast as one thread can make them, all reach the trail."""
        from guard import Policy, Principal, RolePolicy
        from guard.shop import build_shop

        handle = configure(trail_dir=trail_dir, masking_key=KEY, metrics=False)
        policy = Policy(
            roles={"bench": RolePolicy(tools=frozenset({"get_order"}))},
            rate_limit=None,
            max_steps_per_session=10**9,
            max_steps_per_turn=10**9,
            max_identical_calls=10**9,
            max_invalid_in_a_row=10**9,
        )
        shop = build_shop(policy=policy, observer=handle.observer)
        session = shop.guard.session(
            "s", Principal(id="CUS-1", role="bench", scopes=frozenset({"orders:read"}))
        )
        calls = ('{"order_id": "ORD-1001"}', '{"order_id": 1001}', '{"order_id": "ORD-1003"}', "{")
        for index in range(100_000):
            session.execute("get_order", calls[index % 4], call_id=f"c{index}")
        handle.shutdown()
        count = 0
        try:
            for path in handle.trail_files:
                with path.open() as lines:
                    for line in lines:
                        count += line.count('"name":"execute_tool get_order"')
        finally:
            for path in handle.trail_files:
                path.unlink()
        assert count == 100_000
