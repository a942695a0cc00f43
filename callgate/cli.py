"""The ``callgate`` command: one group, each package contributing its commands."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from analytics.cli import (
    alerts_command,
    export_command,
    load_command,
    report_command,
    trace_command,
)
from callgate._errors import OneLineErrors
from callgate.approvals import approvals
from callgate.codes import codes_command
from callgate.evaluation.cli import eval_command
from callgate.gateway.cli import gateway
from callgate.replay_cli import replay
from dashboards.cli import dashboard
from telemetry.cli import sidecar
from telemetry.verify import verify_command

__all__ = ["main"]


@click.group(cls=OneLineErrors)
@click.version_option(package_name="callgate")
def main() -> None:
    """callgate: a deterministic, observable gate between an agent's tool calls and your APIs."""


for command in (
    sidecar,
    load_command,
    report_command,
    trace_command,
    alerts_command,
    export_command,
    dashboard,
    verify_command,
    codes_command,
    gateway,
    approvals,
    eval_command,
    replay,
):
    main.add_command(command)


@main.command()
@click.option(
    "--sessions",
    default=2_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Agent sessions to simulate.",
)
@click.option(
    "--seed", default=7, show_default=True, help="Seed: the same seed gives the same traffic."
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where span files and the DuckDB file go (default: a fresh demo-out/run-... directory).",
)
@click.option(
    "--no-dashboard", is_flag=True, help="Print the report and stop; do not serve the dashboard."
)
@click.option(
    "--otlp", is_flag=True, help="Export over OTLP to a sidecar started here; DuckDB fills live."
)
@click.option(
    "--otlp-endpoint",
    default=None,
    metavar="URL",
    help="Export over OTLP to this collector instead (nothing is loaded locally).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the dashboard binds.")
@click.option(
    "--port",
    default=8501,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Dashboard port (0: a free one).",
)
def demo(
    sessions: int,
    seed: int,
    out: Path | None,
    no_dashboard: bool,
    otlp: bool,
    otlp_endpoint: str | None,
    host: str,
    port: int,
) -> None:
    """Simulated agent traffic through the guard, into span files and DuckDB; report; dashboard."""
    from callgate.demo import DemoOptions, default_out, show

    if otlp and otlp_endpoint:
        raise click.UsageError(
            "--otlp starts a local sidecar; --otlp-endpoint names another: pick one"
        )
    options = DemoOptions(
        sessions=sessions,
        seed=seed,
        out=out or default_out(),
        otlp=otlp,
        otlp_endpoint=otlp_endpoint,
    )
    from dashboards.server import PortInUseError

    try:
        show(
            options,
            Console(),
            dashboard=not no_dashboard and otlp_endpoint is None,
            host=host,
            port=port,
        )
    except PortInUseError as exc:
        raise click.ClickException(str(exc)) from exc
