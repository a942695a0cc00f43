"""The sidecar under hostile or broken clients: lengths, codings, bombs, idle sockets, tokens."""

from __future__ import annotations

import contextlib
import functools
import gzip
import http.client
import json
import os
import resource
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from telemetry import SpanFileWriter, configure
from telemetry.cli import sidecar
from telemetry.otlpjson import request_to_json
from telemetry.sidecar import OTLPReceiver

from .conftest import KEY, free_port, make_call, read_spans, start_sidecar

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_PROTOBUF = "application/x-protobuf"


def spans_request(good: int, bad: int = 0) -> ExportTraceServiceRequest:
    """``good`` well-formed spans and ``bad`` ones whose trace id is too short."""
    spans = [
        Span(trace_id=bytes([i + 1]) * 16, span_id=bytes([i + 1]) * 8, name=f"ok {i}")
        for i in range(good)
    ]
    spans += [Span(trace_id=b"short", span_id=b"12345678", name="bad") for _ in range(bad)]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )


def exchange(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, half-close, and read one HTTP response: status, headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        return read_response(sock)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        piece = sock.recv(65536)
        if not piece:
            raise ConnectionError(f"closed without an answer after {buffer!r}")
        buffer += piece
    head, _, body = buffer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
    }
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = sock.recv(65536)
        if not piece:
            break
        body += piece
    return status, headers, body[:length]


@functools.cache
def bomb(mebibytes: int, wbits: int = 31) -> bytes:
    """Zeros that inflate to ``mebibytes`` MiB (gzip with 31, zlib with 15): about 1/1000 the size."""
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = b"\0" * (1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(mebibytes)) + packer.flush()


def post_bytes(body: bytes, *headers: str, path: str = "/v1/traces") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\n" + "".join(h + "\r\n" for h in headers)
    return head.encode() + b"\r\n" + body


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[OTLPReceiver]:
    server = OTLPReceiver(
        SpanFileWriter(tmp_path / "out"),
        grpc_port=0,
        http_port=0,
        max_body=1 << 20,
        max_connections=8,
        idle_timeout=1.0,
        request_timeout=3.0,
    ).start()
    yield server
    server.stop()


def written(receiver: OTLPReceiver) -> int:
    return len(read_spans(receiver.ingest.writer.directory))


class TestBodies:
    def test_chunked_body_is_read_and_stored(self, receiver: OTLPReceiver) -> None:
        """Transfer-Encoding: chunked is decoded, its spans written, the answer 200."""
        body = spans_request(3).SerializeToString()
        connection = http.client.HTTPConnection("127.0.0.1", receiver.http_port, timeout=10)
        pieces = iter([body[:7], body[7:30], body[30:]])
        connection.request(
            "POST",
            "/v1/traces",
            body=pieces,
            headers={"Content-Type": _PROTOBUF},
            encode_chunked=True,
        )
        response = connection.getresponse()
        assert response.status == 200
        response.read()
        connection.close()
        assert written(receiver) == 3

    def test_request_without_length_is_411(self, receiver: OTLPReceiver) -> None:
        """A POST with neither Content-Length nor chunked is refused, not accepted-and-dropped."""
        status, headers, _ = exchange(
            receiver.http_port or 0, post_bytes(b"", f"Content-Type: {_PROTOBUF}")
        )
        assert status == 411
        assert headers["connection"] == "close"

    @pytest.mark.parametrize(
        "value", ["-1", "+12", "abc", "1e3", "0x10", "", "12, 13", "99999999999999999999"]
    )
    def test_bad_content_length_is_answered_400(self, receiver: OTLPReceiver, value: str) -> None:
        """A malformed Content-Length gets 400 (no silent hang, no body cap bypass)."""
        data = post_bytes(b"x" * 12, f"Content-Type: {_PROTOBUF}", f"Content-Length: {value}")
        status, headers, _ = exchange(receiver.http_port or 0, data)
        assert status == 400
        assert headers["connection"] == "close"

    def test_conflicting_content_lengths_and_te_with_cl(self, receiver: OTLPReceiver) -> None:
        """Two different lengths, or a length with chunked: 400 (request smuggling shapes)."""
        port = receiver.http_port or 0
        two = post_bytes(
            b"abc", f"Content-Type: {_PROTOBUF}", "Content-Length: 3", "Content-Length: 4"
        )
        assert exchange(port, two)[0] == 400
        both = post_bytes(
            b"3\r\nabc\r\n0\r\n\r\n",
            f"Content-Type: {_PROTOBUF}",
            "Content-Length: 3",
            "Transfer-Encoding: chunked",
        )
        assert exchange(port, both)[0] == 400
        other = post_bytes(b"abc", f"Content-Type: {_PROTOBUF}", "Transfer-Encoding: gzip, chunked")
        assert exchange(port, other)[0] == 501

    def test_too_large_is_413_before_the_body_is_read(self, receiver: OTLPReceiver) -> None:
        """A declared length over the cap is answered at once, without waiting for the body."""
        head = post_bytes(b"", f"Content-Type: {_PROTOBUF}", f"Content-Length: {10 << 20}")
        with socket.create_connection(("127.0.0.1", receiver.http_port or 0), timeout=5) as sock:
            sock.sendall(head)  # no body follows, and no half-close: the answer must not wait
            status, headers, _ = read_response(sock)
        assert status == 413
        assert headers["connection"] == "close"

    def test_chunked_over_the_cap_is_413(self, receiver: OTLPReceiver) -> None:
        """Chunks adding up past the cap stop being read at the cap."""
        chunk = b"x" * 65536
        body = (b"10000\r\n" + chunk + b"\r\n") * 20 + b"0\r\n\r\n"
        data = post_bytes(body, f"Content-Type: {_PROTOBUF}", "Transfer-Encoding: chunked")
        assert exchange(receiver.http_port or 0, data)[0] == 413

    @pytest.mark.parametrize("encoding", ["gzip", "deflate"])
    def test_compression_bomb_is_413(self, receiver: OTLPReceiver, encoding: str) -> None:
        """0.5 MiB that inflates to 512 MiB is refused at the 1 MiB cap; the server carries on."""
        packed_bomb = bomb(512, 31 if encoding == "gzip" else 15)
        assert len(packed_bomb) < 1 << 20
        data = post_bytes(
            packed_bomb,
            f"Content-Type: {_PROTOBUF}",
            f"Content-Encoding: {encoding}",
            f"Content-Length: {len(packed_bomb)}",
        )
        status, _, _ = exchange(receiver.http_port or 0, data)
        assert status == 413
        body = spans_request(2).SerializeToString()
        packed = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
        ok = post_bytes(
            packed,
            f"Content-Type: {_PROTOBUF}",
            f"Content-Encoding: {encoding}",
            f"Content-Length: {len(packed)}",
        )
        assert exchange(receiver.http_port or 0, ok)[0] == 200
        assert written(receiver) == 2
        assert receiver.ingest.budget.used == 0

    def test_corrupt_or_unknown_encoding_is_400(self, receiver: OTLPReceiver) -> None:
        """A truncated gzip stream and an unknown Content-Encoding are malformed requests."""
        packed = gzip.compress(spans_request(1).SerializeToString())[:-6]
        for encoding, body in (("gzip", packed), ("br", b"xx")):
            data = post_bytes(
                body,
                f"Content-Type: {_PROTOBUF}",
                f"Content-Encoding: {encoding}",
                f"Content-Length: {len(body)}",
            )
            assert exchange(receiver.http_port or 0, data)[0] == 400

    def test_deeply_nested_json_is_answered(self, receiver: OTLPReceiver) -> None:
        """JSON nested past the parser's depth gets 400, not a dropped connection."""
        for body in (b"[" * 200_000, b'{"resourceSpans":' + b"[" * 50_000):
            data = post_bytes(
                body, "Content-Type: application/json", f"Content-Length: {len(body)}"
            )
            status, _, answer = exchange(receiver.http_port or 0, data)
            assert status == 400
            assert json.loads(answer)["code"] == 3

    def test_deeply_nested_attribute_values_are_answered(self, receiver: OTLPReceiver) -> None:
        """An attribute value nested thousands deep (JSON and protobuf) is answered, never a crash."""
        value = '{"stringValue":"x"}'
        for _ in range(3000):
            value = '{"arrayValue":{"values":[' + value + "]}}"
        span = (
            '{"traceId":"'
            + "ab" * 16
            + '","spanId":"'
            + "cd" * 8
            + '","attributes":[{"key":"k","value":'
            + value
            + "}]}"
        )
        body = ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + "]}]}]}").encode()
        data = post_bytes(body, "Content-Type: application/json", f"Content-Length: {len(body)}")
        assert exchange(receiver.http_port or 0, data)[0] in (200, 400)
        nested = b"\x0a\x00"
        for _ in range(300):  # AnyValue.array_value -> ArrayValue.values -> AnyValue ...
            inner = b"\x0a" + _varint(len(nested)) + nested
            nested = b"\x2a" + _varint(len(inner)) + inner
        attribute = b"\x0a\x01k\x12" + _varint(len(nested)) + nested
        span_bytes = Span(trace_id=b"t" * 16, span_id=b"s" * 8).SerializeToString()
        span_bytes += b"\x4a" + _varint(len(attribute)) + attribute
        scope = b"\x12" + _varint(len(span_bytes)) + span_bytes
        group = b"\x12" + _varint(len(scope)) + scope
        proto = b"\x0a" + _varint(len(group)) + group
        data = post_bytes(proto, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(proto)}")
        assert exchange(receiver.http_port or 0, data)[0] in (200, 400)

    def test_expect_continue_comes_after_the_checks(self, tmp_path: Path) -> None:
        """`Expect: 100-continue` gets 100 only for a request that passes the checks, else the refusal."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "e"), grpc_port=None, http_port=0, token="t"
        ).start()
        try:
            body = spans_request(1).SerializeToString()
            base = (
                f"Content-Type: {_PROTOBUF}",
                f"Content-Length: {len(body)}",
                "Expect: 100-continue",
            )
            with socket.create_connection(("127.0.0.1", server.http_port or 0), timeout=5) as sock:
                sock.sendall(post_bytes(b"", *base))
                assert read_response(sock)[0] == 401
            with socket.create_connection(("127.0.0.1", server.http_port or 0), timeout=5) as sock:
                sock.sendall(post_bytes(b"", *base, "Authorization: Bearer t"))
                assert read_response(sock)[0] == 100
                sock.sendall(body)
                assert read_response(sock)[0] == 200
            assert len(read_spans(tmp_path / "e")) == 1
        finally:
            server.stop()

    def test_other_methods_and_garbage_lines_are_answered(self, receiver: OTLPReceiver) -> None:
        """GET gets 405; a request line that is not HTTP gets 400."""
        port = receiver.http_port or 0
        assert exchange(port, b"GET /v1/traces HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 405
        assert exchange(port, b"\x16\x03\x01 garbage\r\n\r\n")[0] == 400
        many = b"POST /v1/traces HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
        assert exchange(port, many)[0] == 431
        long = b"X: " + b"y" * 60_000 + b"\r\n"
        assert exchange(port, b"POST /v1/traces HTTP/1.1\r\n" + long * 3 + b"\r\n")[0] == 431

    def test_header_bound_holds_when_a_library_raises_http_clients(
        self, receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """clickhouse-connect raises http.client's header-count global to 10,000; ours stays 100."""
        monkeypatch.setattr(http.client, "_MAXHEADERS", 10_000)
        many = b"POST /v1/traces HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n"
        assert exchange(receiver.http_port or 0, many)[0] == 431


def _varint(value: int) -> bytes:
    out = b""
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


class TestPartialSuccess:
    def test_http_protobuf_keeps_the_good_spans(self, receiver: OTLPReceiver) -> None:
        """One bad span among five: four are written, the answer counts the one left out."""
        body = spans_request(4, bad=1).SerializeToString()
        status, _, answer = exchange(
            receiver.http_port or 0,
            post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}"),
        )
        assert status == 200
        partial = ExportTraceServiceResponse.FromString(answer).partial_success
        assert partial.rejected_spans == 1
        assert "trace_id" in partial.error_message
        assert written(receiver) == 4
        assert receiver.stats.rejected_spans == 1

    def test_http_json_keeps_the_good_spans(self, receiver: OTLPReceiver) -> None:
        """The same over OTLP/JSON: partialSuccess in the JSON answer."""
        body = request_to_json(spans_request(2, bad=2)).encode()
        status, _, answer = exchange(
            receiver.http_port or 0,
            post_bytes(body, "Content-Type: application/json", f"Content-Length: {len(body)}"),
        )
        assert status == 200
        assert json.loads(answer)["partialSuccess"]["rejectedSpans"] == "2"
        assert written(receiver) == 2

    def test_grpc_keeps_the_good_spans(self, receiver: OTLPReceiver) -> None:
        """Over gRPC the response carries partial_success; the good spans are on disk."""
        with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
            export = channel.unary_unary(_EXPORT)
            answer = export(spans_request(3, bad=1).SerializeToString(), timeout=5)
        assert ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans == 1
        assert written(receiver) == 3

    def test_all_bad_is_still_a_bad_request(self, receiver: OTLPReceiver) -> None:
        """Nothing good in it: 400, as before (a client must not retry it)."""
        body = spans_request(0, bad=2).SerializeToString()
        status, _, _ = exchange(
            receiver.http_port or 0,
            post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}"),
        )
        assert status == 400
        assert written(receiver) == 0


class TestConnections:
    def test_idle_connection_is_closed(self, receiver: OTLPReceiver) -> None:
        """A connection that sends nothing is closed after the idle timeout (1 s here)."""
        with socket.create_connection(("127.0.0.1", receiver.http_port or 0), timeout=10) as sock:
            start = time.monotonic()
            assert sock.recv(1) == b""
            assert time.monotonic() - start < 5

    def test_trickling_request_is_cut_at_the_request_deadline(self, receiver: OTLPReceiver) -> None:
        """Headers sent a byte every 0.2 s (each read within the idle timeout) are cut at 3 s."""
        closed = threading.Event()
        with socket.create_connection(("127.0.0.1", receiver.http_port or 0), timeout=10) as sock:
            start = time.monotonic()
            try:
                for byte in b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.2)
            except OSError:
                closed.set()
            if not closed.is_set():
                assert sock.recv(1) == b""
            assert time.monotonic() - start < 8

    def test_connections_over_the_cap_get_503(self, receiver: OTLPReceiver) -> None:
        """With 8 connections held open, the 9th is answered 503 at once; later ones work again."""
        port = receiver.http_port or 0
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(8)]
        try:
            time.sleep(0.2)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
                status, headers, _ = read_response(extra)
            assert status == 503
            assert headers["retry-after"] == "1"
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 5
        while True:
            body = spans_request(1).SerializeToString()
            status, _, _ = exchange(
                port, post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}")
            )
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status == 200

    def test_many_half_open_connections_hold_few_threads(self, receiver: OTLPReceiver) -> None:
        """300 connections that never send a byte: threads stay within the cap, all are let go."""
        before = threading.active_count()
        port = receiver.http_port or 0
        socks = []
        for _ in range(300):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError:
                break
        server = receiver.http_server
        assert server is not None

        def handled() -> int:
            return server.refused_connections + server.accepted_connections

        deadline = time.monotonic() + 15
        while handled() < len(socks) and time.monotonic() < deadline:
            assert threading.active_count() <= before + 8 + 2
            time.sleep(0.1)
        assert handled() == len(socks)
        assert server.refused_connections > len(socks) // 2
        assert threading.active_count() <= before + 8 + 2
        for sock in socks:
            sock.close()
        deadline = time.monotonic() + 5
        while server.active_connections and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.active_connections == 0

    def test_busy_budget_is_503(self, tmp_path: Path) -> None:
        """While another request holds most of the byte budget, the next is told to retry (503)."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "b"), grpc_port=None, http_port=0, max_inflight=100_000
        ).start()
        port = server.http_port or 0
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as holder:
                # 90 kB announced, 10 bytes sent: the budget holds 90 kB while the body is awaited
                holder.sendall(
                    post_bytes(b"x" * 10, f"Content-Type: {_PROTOBUF}", "Content-Length: 90000")
                )
                time.sleep(0.3)
                body = spans_request(30).SerializeToString()  # ~1 kB, 32x that to decode
                status, headers, _ = exchange(
                    port,
                    post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}"),
                )
                assert status == 503
                assert headers["retry-after"] == "1"
            time.sleep(0.3)
            assert (
                exchange(
                    port,
                    post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}"),
                )[0]
                == 200
            )
        finally:
            server.stop()

    def test_too_large_to_decode_within_the_budget_is_413(self, tmp_path: Path) -> None:
        """A body whose worst-case decoding exceeds the whole budget is refused for good (413)."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "d"), grpc_port=0, http_port=0, max_inflight=10_000
        ).start()
        try:
            body = spans_request(30).SerializeToString()
            status, _, _ = exchange(
                server.http_port or 0,
                post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}"),
            )
            assert status == 413
            with (
                grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel,
                pytest.raises(grpc.RpcError) as raised,
            ):
                channel.unary_unary(_EXPORT)(body, timeout=5)
            assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        finally:
            server.stop()


class TestGRPCLimits:
    def test_message_over_the_cap_is_refused(self, receiver: OTLPReceiver) -> None:
        """A gRPC message over max_body is RESOURCE_EXHAUSTED; nothing is written."""
        big = Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="x" * (2 << 20))
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[big])])]
        )
        with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
            export = channel.unary_unary(_EXPORT)
            with pytest.raises(grpc.RpcError) as raised:
                export(request.SerializeToString(), timeout=10)
        assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        assert written(receiver) == 0

    def test_gzip_bomb_over_grpc_is_refused(self, receiver: OTLPReceiver) -> None:
        """A message that gzips small but inflates past max_body is refused after inflating."""
        big = Span(trace_id=b"t" * 16, span_id=b"s" * 8, name="x" * (16 << 20))
        request = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[big])])]
        )
        options = [("grpc.max_send_message_length", 128 << 20)]
        with grpc.insecure_channel(
            f"127.0.0.1:{receiver.grpc_port}", options=options, compression=grpc.Compression.Gzip
        ) as channel:
            export = channel.unary_unary(_EXPORT)
            with pytest.raises(grpc.RpcError) as raised:
                export(request.SerializeToString(), timeout=60)
        assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        with grpc.insecure_channel(
            f"127.0.0.1:{receiver.grpc_port}", compression=grpc.Compression.Gzip
        ) as channel:
            channel.unary_unary(_EXPORT)(spans_request(2).SerializeToString(), timeout=10)
        assert written(receiver) == 2


class TestAuth:
    def test_non_loopback_needs_a_token_or_insecure(self, tmp_path: Path) -> None:
        """0.0.0.0 without a token is refused; with a token or insecure=True it binds."""
        writer = SpanFileWriter(tmp_path / "a")
        with pytest.raises(ValueError, match="not loopback"):
            OTLPReceiver(writer, host="0.0.0.0", grpc_port=0, http_port=0)
        for options in ({"token": "s3cret"}, {"insecure": True}):
            server = OTLPReceiver(writer, host="0.0.0.0", grpc_port=0, http_port=0, **options)  # type: ignore[arg-type]
            server.start()
            server.stop()
        assert (
            OTLPReceiver(writer, host="localhost", grpc_port=None, http_port=None).host
            == "localhost"
        )

    def test_cli_refuses_open_bind_without_token(self, tmp_path: Path) -> None:
        """`callgate sidecar --host 0.0.0.0` without a token exits with a usage error."""
        result = CliRunner().invoke(
            sidecar,
            ["--dir", str(tmp_path), "--host", "0.0.0.0", "--grpc-port", "0", "--http-port", "0"],
        )
        assert result.exit_code == 2
        assert "bearer token" in result.output

    def test_http_token(self, tmp_path: Path) -> None:
        """With a token, HTTP requests without it or with a wrong one get 401; the right one 200."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "h"), grpc_port=None, http_port=0, token="s3cret"
        ).start()
        try:
            body = spans_request(1).SerializeToString()
            base = (f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}")
            port = server.http_port or 0
            status, headers, _ = exchange(port, post_bytes(body, *base))
            assert (status, headers["www-authenticate"]) == (401, "Bearer")
            assert exchange(port, post_bytes(body, *base, "Authorization: Bearer s3cre"))[0] == 401
            assert exchange(port, post_bytes(body, *base, "Authorization: Basic s3cret"))[0] == 401
            assert exchange(port, post_bytes(body, *base, "Authorization: Bearer s3cret"))[0] == 200
            assert len(read_spans(tmp_path / "h")) == 1
        finally:
            server.stop()

    @pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
    def test_sdk_exporter_with_token(self, tmp_path: Path, protocol: str) -> None:
        """The real OTLP exporters send the token as a header/metadata; spans arrive."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "s"), grpc_port=0, http_port=0, token="tok-1"
        ).start()
        try:
            port = server.grpc_port if protocol == "grpc" else server.http_port
            os.environ["OTEL_EXPORTER_OTLP_TRACES_HEADERS"] = "authorization=Bearer tok-1"
            try:
                handle = configure(
                    trail=False,
                    otlp=True,
                    otlp_endpoint=f"http://127.0.0.1:{port}",
                    otlp_protocol=protocol,
                    otlp_timeout=5,
                    metrics=False,
                    masking_key=KEY,
                )
                handle.observer.call_ended(*make_call())
                assert handle.force_flush(10)
                handle.shutdown()
            finally:
                del os.environ["OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
            assert len(read_spans(tmp_path / "s")) == 10
        finally:
            server.stop()

    def test_grpc_without_token_is_unauthenticated(self, tmp_path: Path) -> None:
        """A gRPC call without the right metadata is UNAUTHENTICATED and writes nothing."""
        server = OTLPReceiver(
            SpanFileWriter(tmp_path / "g"), grpc_port=0, http_port=None, token="tok"
        ).start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                export = channel.unary_unary(_EXPORT)
                for metadata in ((), (("authorization", "Bearer nope"),)):
                    with pytest.raises(grpc.RpcError) as raised:
                        export(spans_request(1).SerializeToString(), timeout=5, metadata=metadata)
                    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
                export(
                    spans_request(1).SerializeToString(),
                    timeout=5,
                    metadata=(("authorization", "Bearer tok"),),
                )
            assert len(read_spans(tmp_path / "g")) == 1
            assert server.stats.rejected == 2
        finally:
            server.stop()


_HEADER = st.sampled_from(
    [
        "Content-Type: application/x-protobuf",
        "Content-Type: application/json",
        "Content-Type: text/plain",
        "Content-Length: 0",
        "Content-Length: 5",
        "Content-Length: -1",
        "Content-Length: 18446744073709551616",
        "Content-Length: 5, 6",
        "Transfer-Encoding: chunked",
        "Transfer-Encoding: identity",
        "Content-Encoding: gzip",
        "Content-Encoding: deflate",
        "Expect: 100-continue",
        "Connection: close",
        "Authorization: Bearer x",
        "X: \x00\xff",
        "NoColon",
    ]
)
_REQUEST = st.builds(
    lambda method, path, version, headers, body: (
        (f"{method} {path} {version}\r\n" + "".join(h + "\r\n" for h in headers)).encode("latin-1")
        + b"\r\n"
        + body
    ),
    st.sampled_from(["POST", "GET", "PUT", "POST", "BREW", ""]),
    st.sampled_from(["/v1/traces", "/v1/traces/", "/v1/logs", "*", "/v1/traces?x=1", "//"]),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 extra", ""]),
    st.lists(_HEADER, max_size=5),
    st.one_of(
        st.binary(max_size=64),
        st.just(b"5\r\nhello\r\n0\r\n\r\n"),
        st.just(b"zz\r\n"),
        st.just(gzip.compress(b"\x0a\x00")),
        st.just(spans_request(1, bad=1).SerializeToString()),
    ),
)


class TestFuzz:
    @settings(
        max_examples=120,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(request=_REQUEST)
    def test_every_request_gets_an_answer(self, receiver: OTLPReceiver, request: bytes) -> None:
        """Whatever a client sends (then half-closes), it gets one HTTP answer, and the server lives."""
        status, _, _ = exchange(receiver.http_port or 0, request)
        assert 100 <= status < 600
        if status == 100:  # Expect: 100-continue answered first; the final answer follows
            return
        assert status != 500, request

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(data=st.binary(max_size=256))
    def test_random_bytes_never_break_the_server(self, receiver: OTLPReceiver, data: bytes) -> None:
        """Arbitrary bytes: an answer or a close, never a crash; a good request works right after."""
        with contextlib.suppress(ConnectionError):  # nothing that reads as a request: a close
            exchange(receiver.http_port or 0, data, timeout=5)
        body = spans_request(1).SerializeToString()
        good = post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}")
        assert exchange(receiver.http_port or 0, good)[0] == 200


def _peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


class TestBombMemory:
    def test_rss_stays_bounded_under_compression_bombs(self, tmp_path: Path) -> None:
        """Four clients each sending 1 MiB gzip bombs (1 GiB inflated): the sidecar's peak RSS stays low."""
        port = free_port()
        args = ["--dir", str(tmp_path / "out"), "--grpc-port", "-1", "--http-port", str(port)]
        process = start_sidecar(args, port=port)
        try:
            packed = bomb(1024)
            data = post_bytes(
                packed,
                f"Content-Type: {_PROTOBUF}",
                "Content-Encoding: gzip",
                f"Content-Length: {len(packed)}",
            )
            statuses: list[int] = []

            def send() -> None:
                for _ in range(3):
                    statuses.append(exchange(port, data, timeout=60)[0])

            threads = [threading.Thread(target=send) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            peak_mib = _peak_rss_kib(process.pid) / 1024
        finally:
            process.terminate()
            process.communicate(timeout=20)
        assert statuses == [413] * 12
        assert peak_mib < 250, f"peak RSS {peak_mib:.0f} MiB"


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))


class TestStorageFailure:
    def test_unwritable_spans_are_503_and_unavailable(self, tmp_path: Path) -> None:
        """Past a 200 kB file-size limit (EFBIG, a real OS refusal) requests are told to retry."""
        grpc_port, http_port = free_port(), free_port()
        args = [
            "--dir",
            str(tmp_path),
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
        ]
        process = start_sidecar(
            args,
            port=http_port,
            prelude="import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); ",
            preexec_fn=_limit_file_size,
        )
        try:
            body = spans_request(200).SerializeToString()
            data = post_bytes(body, f"Content-Type: {_PROTOBUF}", f"Content-Length: {len(body)}")
            statuses = [exchange(http_port, data)[0] for _ in range(12)]
            assert statuses[0] == 200
            assert statuses[-1] == 503
            assert set(statuses) == {200, 503}
            with (
                grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
                pytest.raises(grpc.RpcError) as raised,
            ):
                channel.unary_unary(_EXPORT)(body, timeout=10)
            assert raised.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        finally:
            process.terminate()
            output, _ = process.communicate(timeout=20)
        assert process.returncode == 0
        assert b"rejected" in output


class TestBindFailure:
    def test_a_taken_port_is_reported_as_such(self) -> None:
        """Binding the HTTP endpoint to a port another socket listens on raises the OSError
        (EADDRINUSE) itself, not an AttributeError from the cleanup (the soak found a sidecar
        restarted onto a still-held port dying with the AttributeError alone)."""
        import errno

        from telemetry.sidecar.http_server import HTTPLimits, OTLPHTTPServer
        from telemetry.sidecar.limits import ByteBudget

        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            limits = HTTPLimits(
                max_body=1024,
                budget=ByteBudget(1 << 20),
                max_connections=4,
                idle_timeout=1.0,
                request_timeout=1.0,
                verifier=None,
            )
            with pytest.raises(OSError) as raised:
                OTLPHTTPServer(taken.getsockname(), lambda body, kind: None, limits, lambda: None)  # type: ignore[arg-type, return-value]
        assert raised.value.errno == errno.EADDRINUSE
