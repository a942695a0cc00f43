"""Spans through OpenTelemetry: the host's provider, OTLP to a collector that is down, metrics, env."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from guard.codes import Code
from telemetry import attributes, configure
from telemetry.export import PacedSpanProcessor

from .conftest import KEY, make_call, read_spans


def host_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


class TestHostProvider:
    def test_spans_go_through_the_hosts_provider(self) -> None:
        """With the host's TracerProvider, the same call and stage spans arrive there, with their times."""
        provider, exporter = host_provider()
        handle = configure(trail=False, tracer_provider=provider, masking_key=KEY)
        call, result = make_call(code=Code.NOT_FOUND, retries=1)
        handle.observer.call_ended(call, result)
        handle.shutdown()
        spans = exporter.get_finished_spans()
        names = [span.name for span in spans]
        assert "execute_tool pay" in names and "guard.execute" in names
        assert len(spans) == 10
        call_span = next(span for span in spans if span.name == "execute_tool pay")
        assert call_span.kind is SpanKind.INTERNAL
        assert call_span.start_time == call.start_ns and call_span.end_time == call.end_ns
        assert call_span.attributes is not None
        assert call_span.attributes[attributes.ERROR_TYPE] == "NOT_FOUND"
        assert call_span.status.status_code is StatusCode.ERROR
        execute = next(span for span in spans if span.name == "guard.execute")
        assert execute.parent is not None and execute.parent.span_id == call_span.context.span_id
        assert [event.name for event in execute.events] == ["guard.retry"]
        assert call_span.instrumentation_scope is not None
        assert call_span.instrumentation_scope.name == "callgate.telemetry"

    def test_a_service_name_the_hosts_spans_cannot_carry_is_said(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """service_name under the host's provider is not silently dropped: a warning names both;
        when the host's resource already says the same name, nothing is said."""
        from opentelemetry.sdk.resources import Resource

        provider, _ = host_provider()
        with caplog.at_level("WARNING", logger="telemetry"):
            configure(trail=False, tracer_provider=provider, service_name="bot", masking_key=KEY)
        assert any("service_name='bot'" in r.getMessage() for r in caplog.records)
        caplog.clear()
        named = TracerProvider(resource=Resource.create({"service.name": "bot"}))
        with caplog.at_level("WARNING", logger="telemetry"):
            configure(trail=False, tracer_provider=named, service_name="bot", masking_key=KEY)
        assert not [r for r in caplog.records if "service_name" in r.getMessage()]

    def test_the_hosts_provider_is_not_shut_down(self) -> None:
        """shutdown() closes what callgate made and leaves the host's provider running."""
        provider, exporter = host_provider()
        handle = configure(trail=False, tracer_provider=provider, masking_key=KEY)
        handle.shutdown()
        provider.get_tracer("host").start_span("after").end()
        assert [span.name for span in exporter.get_finished_spans()] == ["after"]


class TestCollectorDown:
    @pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
    def test_never_blocks_and_counts_drops(self, closed_port: int, protocol: str) -> None:
        """With nothing listening, call latency stays bounded and the lost spans are counted."""
        handle = configure(
            trail=False,
            otlp=True,
            otlp_endpoint=f"http://127.0.0.1:{closed_port}",
            otlp_protocol=protocol,
            otlp_timeout=0.5,
            max_queue_size=64,
            masking_key=KEY,
            metrics=False,
        )
        slowest = 0.0
        for _ in range(2_000):
            call, result = make_call()
            started = time.perf_counter()
            handle.observer.call_ended(call, result)
            slowest = max(slowest, time.perf_counter() - started)
        assert slowest < 0.05
        handle.force_flush(2)
        started = time.perf_counter()
        handle.shutdown(timeout=2)
        assert time.perf_counter() - started < 10
        # Every span was lost one way or another; the SDK's queue-full count may race by a span or two.
        assert 15_000 < handle.dropped_spans <= 20_010


class TestMetrics:
    def test_calls_stage_durations_and_drops(self, tmp_path: Path) -> None:
        """Calls by tool and code, stage durations and the dropped-spans counter are recorded."""
        reader = InMemoryMetricReader()
        handle = configure(trail_dir=tmp_path, metric_readers=[reader], masking_key=KEY)
        handle.observer.call_ended(*make_call())
        handle.observer.call_ended(*make_call(code=Code.NOT_FOUND, stages=("budget", "rules")))
        handle.observer.force_flush(5)
        data = reader.get_metrics_data()
        assert data is not None
        metrics = {
            metric.name: metric
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }
        assert {"callgate.calls", "callgate.stage.duration", "callgate.call.duration"} <= set(
            metrics
        )
        assert "callgate.telemetry.dropped_spans" in metrics
        calls = {
            (point.attributes["gen_ai.tool.name"], point.attributes["guard.code"]): point.value
            for point in metrics["callgate.calls"].data.data_points  # type: ignore[union-attr]
            if point.attributes is not None
        }
        assert calls == {("pay", "OK"): 1, ("pay", "NOT_FOUND"): 1}
        stages = {
            point.attributes["guard.stage.name"]
            for point in metrics["callgate.stage.duration"].data.data_points  # type: ignore[union-attr]
            if point.attributes is not None
        }
        assert {"budget", "rules", "execute"} <= stages
        handle.shutdown()


class TestEnvironment:
    def test_service_name_from_env(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """OTEL_SERVICE_NAME names the resource of the trail."""
        monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
        handle = configure(trail_dir=tmp_path, masking_key=KEY)
        handle.observer.call_ended(*make_call())
        handle.shutdown()
        assert '"stringValue":"from-env"' in next(tmp_path.glob("*.jsonl")).read_text()

    def test_sdk_disabled(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """OTEL_SDK_DISABLED=true leaves an observer that does nothing."""
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        handle = configure(trail_dir=tmp_path / "t", masking_key=KEY)
        handle.observer.call_ended(*make_call())
        handle.shutdown()
        assert not (tmp_path / "t").exists()
        assert handle.observer.sinks == ()

    def test_endpoint_env_turns_otlp_on(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, closed_port: int
    ) -> None:
        """OTEL_EXPORTER_OTLP_ENDPOINT alone enables OTLP export (and metrics beside it)."""
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{closed_port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.2")
        handle = configure(trail=False, masking_key=KEY)
        assert handle.tracer_provider is not None
        assert handle.meter_provider is not None
        handle.shutdown(timeout=2)

    def test_masking_key_from_env(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """CALLGATE_MASKING_KEY keys the hashes, so two processes with one key correlate."""
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())
        handle = configure(trail=False)
        assert handle.masker.principal("CUS-1") == configure(
            trail=False, masking_key=KEY
        ).masker.principal("CUS-1")
        handle.shutdown()


class BlockedExporter(InMemorySpanExporter):
    """An exporter that holds every batch until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.gate.wait(timeout=30)
        return super().export(spans)


class TestPacedSpanProcessor:
    """Drops are decided and counted by callgate through public SDK hooks, exactly."""

    def test_a_stalled_exporter_drops_exactly_what_did_not_fit(self) -> None:
        """With 4 spans unexported and no wait allowed, the other 6 are dropped and counted."""
        exporter = BlockedExporter()
        processor = PacedSpanProcessor(
            exporter, max_queue_size=4, max_export_batch_size=2, max_wait=0
        )
        provider = TracerProvider()
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("test")
        for i in range(10):
            tracer.start_span(f"s{i}").end()
        exporter.gate.set()
        provider.shutdown()
        assert processor.dropped == 6
        assert processor.exporter.exported == 4 and processor.lost == 6
        assert [s.name for s in exporter.get_finished_spans()] == ["s0", "s1", "s2", "s3"]

    def test_a_live_exporter_loses_nothing_to_a_small_queue(self) -> None:
        """A burst of 2,000 spans through a queue of 8 is paced, not dropped."""
        exporter = InMemorySpanExporter()
        processor = PacedSpanProcessor(exporter, max_queue_size=8, max_export_batch_size=4)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("test")
        for i in range(2_000):
            tracer.start_span(f"s{i}").end()
        provider.shutdown()
        assert processor.dropped == 0 and processor.exporter.failed == 0
        assert len(exporter.get_finished_spans()) == 2_000


SHAPES = st.tuples(
    st.integers(min_value=1, max_value=len(attributes.STAGES)),
    st.integers(min_value=0, max_value=2),
    st.booleans(),
    st.sampled_from([Code.OK, Code.NOT_FOUND, Code.TIMEOUT]),
)


def _ids(span: ReadableSpan) -> tuple[str, str, str, str]:
    assert span.context is not None
    parent = format(span.parent.span_id, "016x") if span.parent is not None else ""
    return (
        format(span.context.trace_id, "032x"),
        format(span.context.span_id, "016x"),
        parent,
        span.name,
    )


class TestOneCallOneId:
    """The trail's copy of a call and the OTLP copy name it by the same trace and span ids."""

    @settings(max_examples=12, deadline=None)
    @given(shapes=st.lists(SHAPES, min_size=1, max_size=6))
    def test_the_trail_and_otlp_carry_the_same_ids(
        self, shapes: list[tuple[int, int, bool, Code]]
    ) -> None:
        """Calls of every length, with retries, rejected or not, inside a host's span or not:
        each span's (trace id, span id, parent id, name) is the same in the trail file and in
        the exporter's batches, and no two calls share a trace id unless a host span links them."""
        host = TracerProvider().get_tracer("host")
        exporter = InMemorySpanExporter()
        with tempfile.TemporaryDirectory() as directory:
            handle = configure(
                trail_dir=directory, otlp=True, span_exporter=exporter, masking_key=KEY
            )
            for length, retries, in_host_span, code in shapes:
                call, result = make_call(
                    code=code, stages=attributes.STAGES[:length], retries=retries
                )
                if in_host_span:
                    with host.start_as_current_span("agent turn"):
                        handle.observer.call_started(call)
                        handle.observer.call_ended(call, result)
                else:
                    handle.observer.call_ended(call, result)
            handle.shutdown()
            trail = {
                (span["traceId"], span["spanId"], span.get("parentSpanId", ""), span["name"])
                for span in read_spans(Path(directory))
            }
        otlp = {_ids(span) for span in exporter.get_finished_spans()}
        assert trail == otlp
        assert len(trail) == sum(length + 1 for length, *_ in shapes)
        alone = [ids for ids in trail if ids[3].startswith("execute_tool") and not ids[2]]
        assert len({ids[0] for ids in alone}) == len(alone)

    def test_given_ids_stay_on_their_thread(self) -> None:
        """Ids given for the replay thread never name a span another thread starts meanwhile."""
        from telemetry.export import GivenIds

        ids = GivenIds()
        provider = TracerProvider(id_generator=ids)
        tracer = provider.get_tracer("t")
        ids.give(0xABC, [0x1, 0x2])
        other: list[int] = []
        thread = threading.Thread(
            target=lambda: other.append(tracer.start_span("elsewhere").get_span_context().trace_id)
        )
        thread.start()
        thread.join()
        mine = tracer.start_span("mine").get_span_context()
        ids.clear()
        after = tracer.start_span("after").get_span_context()
        assert (mine.trace_id, mine.span_id) == (0xABC, 0x1)
        assert other[0] != 0xABC and after.trace_id != 0xABC
