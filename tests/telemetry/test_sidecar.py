"""The sidecar: an OTLP receiver tested with the real OTLP exporters as clients."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from telemetry import SpanFileWriter, configure, parse_request
from telemetry.cli import sidecar
from telemetry.sidecar import OTLPReceiver

from .conftest import KEY, make_call, read_spans

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[OTLPReceiver]:
    server = OTLPReceiver(SpanFileWriter(tmp_path / "sidecar"), grpc_port=0, http_port=0).start()
    yield server
    server.stop()


def export_calls(receiver: OTLPReceiver, protocol: str, count: int = 3) -> None:
    """Send ``count`` calls through callgate's OTLP path with the real exporter for ``protocol``."""
    port = receiver.grpc_port if protocol == "grpc" else receiver.http_port
    handle = configure(
        trail=False,
        otlp=True,
        otlp_endpoint=f"http://127.0.0.1:{port}",
        otlp_protocol=protocol,
        otlp_timeout=5,
        metrics=False,
        masking_key=KEY,
    )
    for _ in range(count):
        handle.observer.call_ended(*make_call())
    assert handle.force_flush(10)
    handle.shutdown()
    assert handle.dropped_spans == 0


def post(port: int, body: bytes, content_type: str, path: str = "/v1/traces") -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        headers={"Content-Type": content_type},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def bad_ids_request() -> ExportTraceServiceRequest:
    span = Span(trace_id=b"short", span_id=b"12345678", name="x")
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
    )


class TestRealExporters:
    @pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
    def test_exporter_spans_land_in_span_files(self, receiver: OTLPReceiver, protocol: str) -> None:
        """Spans sent by the real OTLP exporter arrive in the sidecar's files in the trail's format."""
        export_calls(receiver, protocol)
        spans = read_spans(receiver.ingest.writer.directory)
        assert len(spans) == 30
        assert sum(span["name"] == "execute_tool pay" for span in spans) == 3
        call_span = next(span for span in spans if span["name"] == "execute_tool pay")
        assert call_span["attrs"]["guard.code"] == "OK"
        assert call_span["attrs"]["guard.step"] == 1
        for path in receiver.ingest.writer.directory.glob("*.jsonl"):
            for line in path.read_text().splitlines():
                parse_request(line)

    def test_http_json(self, receiver: OTLPReceiver, tmp_path: Path) -> None:
        """OTLP/HTTP JSON (hex ids) is accepted and answered in JSON."""
        handle = configure(trail_dir=tmp_path / "trail", masking_key=KEY)
        handle.observer.call_ended(*make_call())
        handle.shutdown()
        line = next((tmp_path / "trail").glob("*.jsonl")).read_text().splitlines()[0]
        status, body = post(receiver.http_port or 0, line.encode(), "application/json")
        assert status == 200
        assert json.loads(body) == {}
        assert len(read_spans(receiver.ingest.writer.directory)) == 10


class TestMalformed:
    def test_grpc_garbage_is_invalid_argument(self, receiver: OTLPReceiver) -> None:
        """Bytes that are not a request get INVALID_ARGUMENT, not INTERNAL."""
        with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
            export = channel.unary_unary(_EXPORT)
            with pytest.raises(grpc.RpcError) as raised:
                export(b"\xff\xff\xff\xffnot a protobuf", timeout=5)
            assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            with pytest.raises(grpc.RpcError) as raised:
                export(bad_ids_request().SerializeToString(), timeout=5)
            assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        assert receiver.stats.rejected == 2

    @pytest.mark.parametrize(
        ("body", "content_type"),
        [
            (b"\xff\xff\xff\xffnot a protobuf", "application/x-protobuf"),
            (b"{not json", "application/json"),
            (b'{"resourceSpans":[{"nope":1}]}', "application/json"),
            (
                b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}',
                "application/json",
            ),
        ],
    )
    def test_http_malformed_is_400_with_status(
        self, receiver: OTLPReceiver, body: bytes, content_type: str
    ) -> None:
        """A malformed HTTP body gets 400 with a google.rpc.Status in the request's encoding."""
        status, answer = post(receiver.http_port or 0, body, content_type)
        assert status == 400
        if content_type == "application/json":
            assert json.loads(answer)["code"] == 3
        else:
            assert status_pb2.Status.FromString(answer).code == 3

    def test_http_bad_ids_protobuf(self, receiver: OTLPReceiver) -> None:
        """A protobuf request with ids of the wrong length is refused with 400."""
        status, _ = post(
            receiver.http_port or 0, bad_ids_request().SerializeToString(), "application/x-protobuf"
        )
        assert status == 400

    def test_http_wrong_path_and_type(self, receiver: OTLPReceiver) -> None:
        """Unknown paths get 404, unknown content types 415."""
        assert post(receiver.http_port or 0, b"", "application/x-protobuf", "/v1/logs")[0] == 404
        assert post(receiver.http_port or 0, b"x", "text/plain")[0] == 415

    def test_malformed_requests_do_not_disturb_other_clients(self, receiver: OTLPReceiver) -> None:
        """While one client sends garbage, another's spans all arrive and no bad line is written."""
        stop = threading.Event()

        def garbage() -> None:
            while not stop.is_set():
                post(receiver.http_port or 0, b"\x00garbage", "application/x-protobuf")

        noisy = threading.Thread(target=garbage)
        noisy.start()
        try:
            export_calls(receiver, "grpc", count=20)
            export_calls(receiver, "http/protobuf", count=20)
        finally:
            stop.set()
            noisy.join()
        spans = read_spans(receiver.ingest.writer.directory)
        assert sum(span["name"] == "execute_tool pay" for span in spans) == 40
        assert receiver.stats.rejected > 0


class TestCommand:
    def test_sidecar_command_is_a_click_command(self) -> None:
        """`sidecar` is a click command with the documented options."""
        result = CliRunner().invoke(sidecar, ["--help"])
        assert result.exit_code == 0
        for option in (
            "--grpc-port", "--http-port", "--host", "--dir", "--max-bytes", "--token",
            "--token-file", "--insecure", "--max-body", "--max-inflight", "--max-connections",
            "--idle-timeout",
        ):  # fmt: skip
            assert option in result.output
        assert sidecar.name == "sidecar"

    def test_sidecar_runs_until_sigterm(self, tmp_path: Path) -> None:
        """The command serves on the given ports, writes span files and stops cleanly on SIGTERM."""
        import signal

        from .conftest import free_port, start_sidecar

        grpc_port, http_port = free_port(), free_port()
        args = [
            "--dir",
            str(tmp_path / "out"),
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
        ]
        process = start_sidecar(args, port=http_port)
        try:
            status, _ = post(http_port, b"", "application/x-protobuf")
            assert status == 200  # an empty request is a valid, empty export
            receiver = OTLPReceiver.__new__(OTLPReceiver)
            receiver.grpc_port, receiver.http_port = grpc_port, http_port
            export_calls(receiver, "grpc", count=2)
        finally:
            process.send_signal(signal.SIGTERM)
            output, _ = process.communicate(timeout=20)
        assert process.returncode == 0
        assert b" 20 spans, 0 rejected" in output
        assert len(read_spans(tmp_path / "out")) == 20
