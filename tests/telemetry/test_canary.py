"""The canary test: sensitive values sent through the shop appear in no file, payload, log or table."""

from __future__ import annotations

import logging
from pathlib import Path

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from guard import MultiObserver
from guard.testing import ManualClock
from telemetry import SpanFileWriter, configure
from telemetry.sidecar import Encoded, OTLPReceiver

from .conftest import KEY
from .shop_paths import CANARIES, build_guard, drive


class CapturingReceiver(OTLPReceiver):
    """The sidecar, keeping every payload it accepted."""

    payloads: list[bytes]

    def start(self) -> CapturingReceiver:
        self.payloads = []
        accept = self.ingest.accept_protobuf

        def capture(body: bytes) -> Encoded:
            self.payloads.append(body)
            return accept(body)

        self.ingest.accept_protobuf = capture  # type: ignore[method-assign]
        super().start()
        return self


def load_into_duckdb(directory: Path) -> duckdb.DuckDBPyConnection:
    """The span files as tables: one row per line, per span and per attribute."""
    db = duckdb.connect()
    pattern = str(directory / "**" / "*.jsonl")
    db.execute(f"CREATE TABLE lines AS SELECT json FROM read_json_objects('{pattern}')")
    db.execute(
        """
        CREATE TABLE spans AS
        SELECT unnest(json_extract(json, '$.resourceSpans[*].scopeSpans[*].spans[*]')) AS span
        FROM lines
        """
    )
    db.execute(
        """
        CREATE TABLE attrs AS
        SELECT span ->> '$.name' AS span_name,
               attr ->> '$.key' AS key,
               CAST(attr -> '$.value' AS VARCHAR) AS value
        FROM (SELECT span, unnest(json_extract(span, '$.attributes[*]')) AS attr FROM spans)
        """
    )
    return db


@pytest.mark.parametrize("mode", ["redact", "hash"])
def test_canaries_appear_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """Canaries in a masked field, a reason, an extra field, malformed JSON and a result never leak."""
    caplog.set_level(logging.DEBUG)
    sidecar = CapturingReceiver(
        SpanFileWriter(tmp_path / "files" / "sidecar"), grpc_port=0, http_port=0
    ).start()
    host = TracerProvider()
    host_spans = InMemorySpanExporter()
    host.add_span_processor(SimpleSpanProcessor(host_spans))
    common = {"masking_key": KEY, "mask_mode": mode, "capture_content": True, "metrics": False}
    over_grpc = configure(
        trail_dir=tmp_path / "files" / "trail",
        otlp=True,
        otlp_protocol="grpc",
        otlp_endpoint=f"http://127.0.0.1:{sidecar.grpc_port}",
        tracer_provider=host,
        **common,  # type: ignore[arg-type]
    )
    over_http = configure(
        trail=False,
        otlp=True,
        otlp_protocol="http/protobuf",
        otlp_endpoint=f"http://127.0.0.1:{sidecar.http_port}",
        **common,  # type: ignore[arg-type]
    )
    clock = ManualClock()
    guard, backend = build_guard(MultiObserver([over_grpc.observer, over_http.observer]), clock)
    results = drive(guard, backend, clock)
    for handle in (over_grpc, over_http):
        assert handle.force_flush(10)
        handle.shutdown()
        assert handle.dropped_spans == 0
    sidecar.stop()

    files = sorted((tmp_path / "files").rglob("*.jsonl"))
    texts = {str(path): path.read_text() for path in files}
    texts["payloads"] = b"".join(sidecar.payloads).decode("latin-1")
    texts["host spans"] = "".join(str(span.attributes) for span in host_spans.get_finished_spans())
    texts["logs"] = caplog.text
    db = load_into_duckdb(tmp_path / "files")
    texts["duckdb"] = "\n".join(
        str(row)
        for table in ("lines", "spans", "attrs")
        for row in db.execute(f"FROM {table}").fetchall()
    )
    for where, text in texts.items():
        for canary in CANARIES:
            assert canary not in text, f"{canary!r} leaked into {where}"

    # The canaries' paths did run and reached the spans, masked.
    trail = "".join(text for name, text in texts.items() if "/trail/" in name)
    marker = "REDACTED" if mode == "redact" else ":h_"
    for kind in ("email", "phone", "bearer", "api_key"):
        assert f"{kind if mode == 'redact' else '[' + kind}" in trail
    assert marker in trail
    calls = len(results)
    rows = db.execute(
        "SELECT count(*) FROM spans WHERE span ->> '$.name' LIKE 'execute_tool %'"
    ).fetchone()
    assert rows is not None and rows[0] == 3 * calls  # trail, sidecar over gRPC, sidecar over HTTP
    keys = {row[0] for row in db.execute("SELECT DISTINCT key FROM attrs").fetchall()}
    assert {"guard.arguments", "guard.principal", "gen_ai.tool.call.result"} <= keys
