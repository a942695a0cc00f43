"""``callgate sidecar``: run the OTLP receiver that writes span files."""

from __future__ import annotations

import functools
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from telemetry.chain import env_chain_key
from telemetry.sidecar.limits import MAX_BODY, MAX_INFLIGHT  # the stdlib only: --help stays light
from telemetry.spanfile import SpanFileWriter

__all__ = ["sidecar"]


@click.command("sidecar")
@click.option(
    "--dir",
    "directory",
    default="callgate-trail",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where span files are written.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Anything but loopback needs a token (or --insecure).",
)
@click.option(
    "--grpc-port",
    default=4317,
    show_default=True,
    type=int,
    help="OTLP/gRPC port (0: a free one; -1: off).",
)
@click.option(
    "--http-port",
    default=4318,
    show_default=True,
    type=int,
    help="OTLP/HTTP port, protobuf and JSON (0: a free one; -1: off).",
)
@click.option(
    "--max-bytes",
    default=64 * 1024 * 1024,
    show_default=True,
    type=int,
    help="Rotate a span file once it passes this size.",
)
@click.option("--prefix", default="spans", show_default=True, help="File name prefix.")
@click.option(
    "--token",
    envvar="CALLGATE_SIDECAR_TOKEN",
    default=None,
    show_envvar=True,
    help="Bearer token every request must carry (Authorization: Bearer <token>). "
    "Prefer the environment variable or --token-file: arguments show in ps.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, exists=True),
    default=None,
    help="Read the bearer token from this file (surrounding whitespace stripped).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow a non-loopback --host without a token: anyone who can reach it can write spans.",
)
@click.option(
    "--max-body",
    default=MAX_BODY,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body in bytes, on the wire and once inflated.",
)
@click.option(
    "--max-inflight",
    default=MAX_INFLIGHT,
    show_default=True,
    type=click.IntRange(1),
    help="Bytes all requests in flight may hold together; beyond it: 503 / UNAVAILABLE.",
)
@click.option(
    "--max-connections",
    default=128,
    show_default=True,
    type=click.IntRange(1),
    help="Concurrent OTLP/HTTP connections; more are answered 503 and closed.",
)
@click.option(
    "--idle-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(0.1),
    help="Seconds an idle (or stalled) connection is kept open.",
)
@click.option(
    "--processes",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Encoding worker processes. Above 1, each decodes, encodes and writes requests to its "
    "own span files (its own chain); protocols and limits stay in the receiving process. "
    "Uses more cores when one is not enough.",
)
def sidecar(
    directory: str,
    host: str,
    grpc_port: int,
    http_port: int,
    max_bytes: int,
    prefix: str,
    token: str | None,
    token_file: str | None,
    insecure: bool,
    max_body: int,
    max_inflight: int,
    max_connections: int,
    idle_timeout: float,
    processes: int,
) -> None:
    """Receive OTLP traces on this host and write them as OTLP JSON lines, like the local trail.

    \b
    Examples:
      callgate sidecar --dir sidecar-spans
      callgate sidecar --dir sidecar-spans --processes 2 --grpc-port 4317 --http-port 4318
      callgate sidecar --host 0.0.0.0 --token-file /run/secrets/otlp-token

    Exit codes: 0 stopped (Ctrl-C, SIGTERM), 1 a port is busy or the directory cannot be written,
    2 bad options (a non-loopback --host without a token or --insecure).
    """
    from telemetry.sidecar import OTLPReceiver  # grpc and protobuf: only when the command runs

    if token_file is not None:
        token = Path(token_file).read_text().strip()
    if token is not None and not token.strip():
        raise click.BadParameter("the bearer token is empty", param_hint="--token")
    make_writer = functools.partial(
        SpanFileWriter, directory, prefix=prefix, max_bytes=max_bytes, chain_key=env_chain_key()
    )
    writer = make_writer()
    try:
        receiver = OTLPReceiver(
            writer,
            host=host,
            grpc_port=None if grpc_port < 0 else grpc_port,
            http_port=None if http_port < 0 else http_port,
            token=token,
            insecure=insecure,
            max_body=max_body,
            max_inflight=max_inflight,
            max_connections=max_connections,
            idle_timeout=idle_timeout,
            request_timeout=max(60.0, 2 * idle_timeout),
            processes=processes,
            writer_factory=make_writer if processes > 1 else None,
        )
    except ValueError as error:
        writer.close()
        raise click.UsageError(str(error)) from error
    if token is None and insecure:
        click.echo(
            f"sidecar: WARNING: {host} without a token: anyone who can reach it can write spans",
            err=True,
        )
    receiver.start()
    auth = "bearer token" if token is not None else "no auth"
    workers = f", {processes} encoding processes" if processes > 1 else ""
    click.echo(
        f"sidecar: grpc {host}:{receiver.grpc_port}  http {host}:{receiver.http_port}  "
        f"({auth}{workers}) -> {directory}"
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
        click.echo(
            f"sidecar: {stats.requests} requests, {stats.spans} spans, {stats.rejected} rejected, "
            f"{stats.rejected_spans} malformed spans left out"
        )
