"""``callgate sidecar``: run the OTLP receiver that writes span files."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from telemetry.chain import env_chain_key
from telemetry.sidecar import OTLPReceiver
from telemetry.trail import SpanFileWriter

__all__ = ["sidecar"]


@click.command("sidecar")
@click.option("--dir", "directory", default="callgate-trail", show_default=True,
              type=click.Path(file_okay=False), help="Where span files are written.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--grpc-port", default=4317, show_default=True, type=int,
              help="OTLP/gRPC port (0: a free one; -1: off).")
@click.option("--http-port", default=4318, show_default=True, type=int,
              help="OTLP/HTTP port, protobuf and JSON (0: a free one; -1: off).")
@click.option("--max-bytes", default=64 * 1024 * 1024, show_default=True, type=int,
              help="Rotate a span file once it passes this size.")
@click.option("--prefix", default="spans", show_default=True, help="File name prefix.")
def sidecar(
    directory: str, host: str, grpc_port: int, http_port: int, max_bytes: int, prefix: str
) -> None:
    """Receive OTLP traces on this host and write them as OTLP JSON lines, like the local trail."""
    writer = SpanFileWriter(
        directory, prefix=prefix, max_bytes=max_bytes, chain_key=env_chain_key()
    )
    receiver = OTLPReceiver(
        writer,
        host=host,
        grpc_port=None if grpc_port < 0 else grpc_port,
        http_port=None if http_port < 0 else http_port,
    ).start()
    click.echo(
        f"sidecar: grpc {host}:{receiver.grpc_port}  http {host}:{receiver.http_port}  -> {directory}"
    )
    stop = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        receiver.stop()
        stats = receiver.stats
        click.echo(f"sidecar: {stats.requests} requests, {stats.spans} spans, {stats.rejected} rejected")
