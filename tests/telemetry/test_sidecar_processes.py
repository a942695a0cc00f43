"""The sidecar with encoding worker processes (``--processes N``): same answers, every span once."""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from telemetry import SpanFileWriter, configure
from telemetry.chain import verify
from telemetry.cli import sidecar
from telemetry.sidecar import OTLPReceiver

from .conftest import KEY, free_port, make_call, read_spans, start_sidecar
from .test_sidecar import bad_ids_request, export_calls, post

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_CHAIN_KEY = b"k" * 32
_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"


def start(directory: Path, processes: int) -> OTLPReceiver:
    factory = functools.partial(SpanFileWriter, directory, chain_key=_CHAIN_KEY)
    return OTLPReceiver(
        factory(), grpc_port=0, http_port=0, processes=processes, writer_factory=factory
    ).start()


@pytest.fixture
def pooled(tmp_path: Path) -> Iterator[OTLPReceiver]:
    server = start(tmp_path / "pooled", 2)
    yield server
    server.stop()


@pytest.fixture
def single(tmp_path: Path) -> Iterator[OTLPReceiver]:
    server = start(tmp_path / "single", 1)
    yield server
    server.stop()


def grpc_answer(port: int | None, body: bytes) -> tuple[str, str | bytes]:
    """The gRPC status name and detail (or the response bytes) for one raw Export call."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(_EXPORT)
        try:
            return "OK", export(body, timeout=10)
        except grpc.RpcError as error:
            return error.code().name, error.details()  # type: ignore[attr-defined]


def json_line(tmp_path: Path) -> bytes:
    """One OTLP/JSON request (10 spans) as callgate's local trail writes it."""
    handle = configure(trail_dir=tmp_path / "trail", masking_key=KEY)
    handle.observer.call_ended(*make_call())
    handle.shutdown()
    return next((tmp_path / "trail").glob("*.jsonl")).read_text().splitlines()[0].encode()


def mixed_request() -> ExportTraceServiceRequest:
    """Two good spans and one with a short trace id."""
    spans = [
        Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="good"),
        Span(trace_id=b"short", span_id=b"12345678", name="bad"),
        Span(trace_id=b"t" * 16, span_id=b"r" * 8, name="good"),
    ]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (zombies count as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def wait_gone(pids: list[int], seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def marked_writer(directory: Path, refuse_second: bool = False) -> SpanFileWriter:
    """A worker's writer that leaves ``started-<pid>`` behind; with ``refuse_second``, only one
    worker may make one (the next raises, as a factory whose disk is gone would)."""
    marks = directory / "marks"
    marks.mkdir(parents=True, exist_ok=True)
    if refuse_second and any(marks.iterdir()):
        raise OSError("this worker's writer cannot be made")
    (marks / f"started-{os.getpid()}").touch()
    return SpanFileWriter(directory / "spans")


class TestStart:
    """``start`` returns once every worker has made its writer, or fails."""

    def test_every_worker_has_its_writer_when_start_returns(self, tmp_path: Path) -> None:
        """Both workers ran their writer factory before start() returned (none makes it later)."""
        factory = functools.partial(marked_writer, tmp_path)
        server = OTLPReceiver(
            factory(), grpc_port=None, http_port=0, processes=2, writer_factory=factory
        ).start()
        try:
            assert server.pool is not None
            marks = {path.name for path in (tmp_path / "marks").iterdir()}
            assert marks == {f"started-{pid}" for pid in server.pool.pids()} | {
                f"started-{os.getpid()}"
            }
            assert len(marks) == 3
        finally:
            server.stop()

    def test_a_factory_failing_in_any_worker_fails_start(self, tmp_path: Path) -> None:
        """One worker's factory raising makes start() raise, and leaves no worker behind."""
        factory = functools.partial(marked_writer, tmp_path / "w", refuse_second=True)
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "main"),
            grpc_port=None,
            http_port=0,
            processes=2,
            writer_factory=factory,
        )
        with pytest.raises(BrokenProcessPool):
            server.start()
        assert server.pool is None and server.http_server is None


class TestEverySpanOnce:
    def test_three_protocols_land_once_in_verified_chains(
        self, pooled: OTLPReceiver, tmp_path: Path
    ) -> None:
        """gRPC, HTTP/protobuf and HTTP/JSON spans are all on disk once, in per-worker chains."""
        export_calls(pooled, "grpc", count=4)
        export_calls(pooled, "http/protobuf", count=4)
        line = json_line(tmp_path)
        for _ in range(4):
            assert post(pooled.http_port or 0, line, _JSON) == (200, b"{}")
        pids = pooled.pool.pids() if pooled.pool else []
        pooled.stop()
        directory = tmp_path / "pooled"
        spans = read_spans(directory)
        assert len(spans) == 120
        # The JSON request is sent 4 times (same ids); the exporters' spans are all distinct.
        ids = {(span["traceId"], span["spanId"]) for span in spans}
        assert len(ids) == 80 + 10
        assert pooled.stats.spans == 120
        lines = sum(len(path.read_bytes().splitlines()) for path in directory.glob("*.jsonl"))
        assert pooled.stats.requests == lines
        report = verify([directory], key=_CHAIN_KEY)
        assert report.problems == []
        assert report.keyed == report.lines == pooled.stats.requests
        writers = {path.name.split("-")[2] for path in directory.glob("*.jsonl")}
        assert writers <= {str(pid) for pid in pids}
        assert str(os.getpid()) not in writers  # the receiving process wrote nothing
        assert len(report.chains) == len(writers)


class TestSameAnswers:
    @pytest.mark.parametrize(
        "body",
        [b"\xff\xff\xff\xffnot a protobuf", bad_ids_request().SerializeToString()],
    )
    def test_grpc_malformed(self, pooled: OTLPReceiver, single: OTLPReceiver, body: bytes) -> None:
        """A malformed gRPC request gets the single-process status and message."""
        answer = grpc_answer(pooled.grpc_port, body)
        assert answer[0] == "INVALID_ARGUMENT"
        assert answer == grpc_answer(single.grpc_port, body)
        assert pooled.stats.rejected == single.stats.rejected == 1

    @pytest.mark.parametrize(
        ("body", "content_type"),
        [
            (b"\xff\xff\xff\xffnot a protobuf", _PROTOBUF),
            (bad_ids_request().SerializeToString(), _PROTOBUF),
            (b"{not json", _JSON),
            (b'{"resourceSpans":[{"nope":1}]}', _JSON),
            (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}', _JSON),
            (b'{"resourceSpans":"\xff"}', _JSON),
        ],
    )
    def test_http_malformed(
        self, pooled: OTLPReceiver, single: OTLPReceiver, body: bytes, content_type: str
    ) -> None:
        """A malformed HTTP body gets the single-process status and body (400, google.rpc.Status)."""
        answer = post(pooled.http_port or 0, body, content_type)
        assert answer[0] == 400
        assert answer == post(single.http_port or 0, body, content_type)
        assert read_spans(pooled.ingest.writer.directory) == []

    def test_partial_success(
        self, pooled: OTLPReceiver, single: OTLPReceiver, tmp_path: Path
    ) -> None:
        """A bad span among good ones: the same partial-success answer, the good spans written."""
        body = mixed_request().SerializeToString()
        answer = grpc_answer(pooled.grpc_port, body)
        assert answer[0] == "OK" and answer[1]  # rejected_spans set
        assert answer == grpc_answer(single.grpc_port, body)
        http = post(pooled.http_port or 0, body, _PROTOBUF)
        assert http[0] == 200 and http[1]
        assert http == post(single.http_port or 0, body, _PROTOBUF)
        good = json.loads(json_line(tmp_path))
        spans = good["resourceSpans"][0]["scopeSpans"][0]["spans"]
        spans.append({**spans[0], "traceId": "abc"})
        mixed = json.dumps(good).encode()
        answer_json = post(pooled.http_port or 0, mixed, _JSON)
        assert answer_json[0] == 200
        assert json.loads(answer_json[1])["partialSuccess"]["rejectedSpans"] == "1"
        assert answer_json == post(single.http_port or 0, mixed, _JSON)
        pooled.stop()
        assert len(read_spans(tmp_path / "pooled")) == 2 + 2 + 10
        assert (pooled.stats.spans, pooled.stats.rejected_spans) == (14, 3)
        assert (pooled.stats.spans, pooled.stats.rejected_spans) == (
            single.stats.spans,
            single.stats.rejected_spans,
        )

    def test_write_failure(
        self, pooled: OTLPReceiver, single: OTLPReceiver, tmp_path: Path
    ) -> None:
        """A line that cannot be written: the same 503 answer, counted as a write error."""
        (tmp_path / "pooled").rmdir()  # files open on the first write: that write fails
        (tmp_path / "single").rmdir()
        body = mixed_request().SerializeToString()
        answer = post(pooled.http_port or 0, body, _PROTOBUF)
        assert answer[0] == 503
        assert answer == post(single.http_port or 0, body, _PROTOBUF)
        assert grpc_answer(pooled.grpc_port, body) == grpc_answer(single.grpc_port, body)
        assert pooled.stats.write_errors == single.stats.write_errors == 2
        assert pooled.stats.requests == 0


class TestWorkerDeath:
    def test_killed_workers_answer_503_then_recover(
        self, pooled: OTLPReceiver, tmp_path: Path
    ) -> None:
        """Killed workers: the request meeting the broken pool gets 503, later ones are written."""
        line = json_line(tmp_path)
        assert post(pooled.http_port or 0, line, _JSON)[0] == 200
        pool = pooled.pool
        assert pool is not None
        before = pool.pids()
        assert len(before) == 2
        for pid in before:
            os.kill(pid, signal.SIGKILL)
        assert wait_gone(before)
        status, _ = post(pooled.http_port or 0, line, _JSON)
        assert status == 503
        assert post(pooled.http_port or 0, line, _JSON)[0] == 200
        assert grpc_answer(pooled.grpc_port, mixed_request().SerializeToString())[0] == "OK"
        assert pool.restarts == 1
        after = pool.pids()
        assert len(after) == 2 and not set(after) & set(before)
        pooled.stop()
        assert wait_gone(after, 0)
        assert len(read_spans(tmp_path / "pooled")) == 10 + 10 + 2
        assert verify([tmp_path / "pooled"], key=_CHAIN_KEY).problems == []


class TestStop:
    def test_stop_ends_every_worker(self, tmp_path: Path) -> None:
        """``stop`` ends the worker processes (none left alive) and their files are complete."""
        server = start(tmp_path / "out", 3)
        pool = server.pool
        assert pool is not None
        pids = pool.pids()
        assert len(pids) == 3 and all(alive(pid) for pid in pids)
        export_calls(server, "http/protobuf", count=2)
        server.stop()
        assert server.pool is None
        assert not any(alive(pid) for pid in pids)
        assert len(read_spans(tmp_path / "out")) == 20

    def test_processes_must_be_positive_and_need_a_factory(self, tmp_path: Path) -> None:
        """``processes`` below 1, or above 1 without a writer factory, is refused."""
        writer = SpanFileWriter(tmp_path / "out")
        with pytest.raises(ValueError, match="at least 1"):
            OTLPReceiver(writer, processes=0)
        with pytest.raises(ValueError, match="writer_factory"):
            OTLPReceiver(writer, processes=2)


class TestCommand:
    def test_processes_option_is_validated(self, tmp_path: Path) -> None:
        """``--processes`` is documented and must be at least 1."""
        assert "--processes" in CliRunner().invoke(sidecar, ["--help"]).output
        result = CliRunner().invoke(sidecar, ["--dir", str(tmp_path), "--processes", "0"])
        assert result.exit_code == 2
        assert "--processes" in result.output

    def test_sigterm_leaves_no_worker_behind(self, tmp_path: Path) -> None:
        """`callgate sidecar --processes 2` writes spans and, on SIGTERM, ends all its workers."""
        grpc_port, http_port = free_port(), free_port()
        out = tmp_path / "out"
        args = ["--dir", str(out), "--grpc-port", str(grpc_port), "--http-port", str(http_port)]
        process = start_sidecar([*args, "--processes", "2"], port=http_port)
        try:
            assert post(http_port, json_line(tmp_path), _JSON)[0] == 200
            workers = children(process.pid)
            assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
        finally:
            process.send_signal(signal.SIGTERM)
            stdout, _ = process.communicate(timeout=30)
        assert process.returncode == 0
        assert b"2 encoding processes" in stdout
        assert b"1 requests, 10 spans" in stdout
        assert wait_gone(workers)
        assert len(read_spans(out)) == 10
