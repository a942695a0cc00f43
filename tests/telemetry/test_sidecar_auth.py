"""The sidecar's bearer check on its real servers: any header bytes get 400/401, nothing written."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telemetry import SpanFileWriter
from telemetry.auth import presented_token
from telemetry.sidecar import OTLPReceiver

from .h2_raw import grpc_status
from .test_auth import HEADER_BYTES, TOKEN
from .test_sidecar_limits import exchange, spans_request

_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_BODY = spans_request(1).SerializeToString()
_FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OTLPReceiver]:
    """A sidecar asking for ``TOKEN`` on both endpoints, kept for every example."""
    writer = SpanFileWriter(tmp_path_factory.mktemp("auth"))
    server = OTLPReceiver(writer, grpc_port=0, http_port=0, token=TOKEN).start()
    yield server
    server.stop()


def http_post(port: int, authorization: bytes) -> tuple[int, bytes]:
    """POST one good span with these raw ``Authorization`` bytes; the status and the body."""
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n"
        b"Authorization: " + authorization + b"\r\n\r\n"
    )
    status, _, body = exchange(port, head + _BODY)
    return status, body


class TestHeaderBytes:
    """Non-UTF-8 and malformed Authorization values on the sidecar's real HTTP and gRPC servers."""

    @_FUZZ
    @given(header=HEADER_BYTES)
    def test_http_any_bytes_get_400_or_401_and_write_nothing(
        self, guarded: OTLPReceiver, header: bytes
    ) -> None:
        """A wrong value is 400 or 401 with no traceback and no span written; the token is 200."""
        before = guarded.stats.spans
        status, body = http_post(guarded.http_port or 0, header)
        if presented_token(header) == TOKEN:
            assert status == 200 and guarded.stats.spans == before + 1
        else:
            assert status in (400, 401), (status, body)
            assert b"Traceback" not in body and guarded.stats.spans == before

    def test_http_non_utf8_token_bytes_are_401(self, guarded: OTLPReceiver) -> None:
        """The issue's case: bytes that are not UTF-8 where the token goes are a clean 401."""
        before = guarded.stats.spans
        assert http_post(guarded.http_port or 0, b"Bearer \xff\xfe" + TOKEN)[0] == 401
        assert http_post(guarded.http_port or 0, b"\xc3(" + TOKEN)[0] == 401
        assert http_post(guarded.http_port or 0, b"Bearer " + TOKEN)[0] == 200
        assert guarded.stats.spans == before + 1

    @_FUZZ
    @given(value=st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40))
    def test_grpc_any_metadata_is_unauthenticated_and_writes_nothing(
        self, guarded: OTLPReceiver, value: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Any printable metadata value (all gRPC carries unencoded) but the token: UNAUTHENTICATED."""
        before = guarded.stats.spans
        with (
            caplog.at_level(logging.ERROR),
            grpc.insecure_channel(f"127.0.0.1:{guarded.grpc_port}") as channel,
        ):
            export = channel.unary_unary(_EXPORT)
            for metadata in ((("authorization", value),), (("authorization", f"Bearer {value}"),)):
                try:
                    export(_BODY, timeout=10, metadata=metadata)
                except grpc.RpcError as error:
                    assert error.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
                else:
                    assert presented_token(metadata[0][1]) == TOKEN
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        written = guarded.stats.spans - before
        accepted = sum(presented_token(v) == TOKEN for v in (value, f"Bearer {value}"))
        assert written == accepted

    @_FUZZ
    @given(header=HEADER_BYTES)
    def test_grpc_raw_metadata_bytes_are_refused_quietly(
        self, guarded: OTLPReceiver, header: bytes, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Any bytes as gRPC metadata (over raw HTTP/2): refused, nothing written, no ERROR log."""
        before = guarded.stats.spans
        with caplog.at_level(logging.DEBUG):
            status = grpc_status(
                guarded.grpc_port or 0, _EXPORT, [(b"authorization", header)], _BODY
            )
        if presented_token(header) == TOKEN:
            assert status == "0" and guarded.stats.spans == before + 1
        else:
            # 16: UNAUTHENTICATED; bytes HTTP/2 forbids in a value (NUL): the stream is reset
            assert status in ("16", "reset"), status
            assert guarded.stats.spans == before
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert errors == [] and not any(r.exc_info for r in caplog.records)
        assert not any(r.getMessage().startswith("Invalid encoding") for r in caplog.records)

    def test_grpc_two_authorization_values_are_unauthenticated(self, guarded: OTLPReceiver) -> None:
        """Two authorization entries are ambiguous: refused even when one is right."""
        with grpc.insecure_channel(f"127.0.0.1:{guarded.grpc_port}") as channel:
            export = channel.unary_unary(_EXPORT)
            right = ("authorization", "Bearer " + TOKEN.decode())
            with pytest.raises(grpc.RpcError) as raised:
                export(_BODY, timeout=10, metadata=(right, ("authorization", "Bearer no")))
            assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
            export(_BODY, timeout=10, metadata=(right,))
