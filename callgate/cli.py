"""The ``callgate`` command: one group, each package contributing its commands, loaded lazily.

A command's module is imported only when that command runs (or shows its own ``--help``):
``callgate --help`` lists every command from :data:`COMMANDS` alone and imports no layer, so it
works on a core install and costs no Streamlit, DuckDB or grpc. A command whose extra is not
installed exits 1 with one line naming the extra; a command whose import fails because a root
package is not callgate's (another distribution's ``analytics``, say) says which, as
``callgate doctor`` does.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from callgate._errors import OneLineErrors
from callgate.doctor import ROOTS, find_problems

__all__ = ["COMMANDS", "Entry", "main"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    """A command of the group, known without importing it."""

    name: str
    target: str
    """``module:attribute`` of its click object, where the command lives."""
    extra: str | None
    """The extra that installs what it needs (None: the core install runs it)."""
    help: str
    """Its one-line help, as ``callgate --help`` lists it (a test keeps it equal to the command's)."""


COMMANDS = (
    Entry(
        name="alerts",
        target="analytics.cli:alerts_command",
        extra="analytics",
        help="Evaluate alert rules; print the firing ones and exit 1 when any fires, so cron can "
        "page.",
    ),
    Entry(
        name="approvals",
        target="callgate.approvals:approvals",
        extra=None,
        help="Pending actions a human must decide: list, show, approve, deny.",
    ),
    Entry(
        name="codes",
        target="callgate.codes:codes_command",
        extra="cli",
        help="List the reason codes a guard can answer with: stage, fixable, phrase and advice.",
    ),
    Entry(
        name="dashboard",
        target="dashboards.cli:dashboard",
        extra="dashboard",
        help="Serve the dashboard SREs watch: calls, rejections, recovery, confirmations, latency, "
        "traces.",
    ),
    Entry(
        name="doctor",
        target="callgate.doctor:doctor",
        extra=None,
        help="Check that the packages callgate installs are callgate's, not another distribution's.",
    ),
    Entry(
        name="eval",
        target="callgate.evaluation.cli:eval_command",
        extra="cli",
        help="Score the calls of a labelled case file (JSON lines) against the guard's tools.",
    ),
    Entry(
        name="export",
        target="analytics.cli:export_command",
        extra="analytics",
        help="Export the spans to Parquet (one directory per day), or calls as a replay scenario.",
    ),
    Entry(
        name="gateway",
        target="callgate.gateway.cli:gateway",
        extra="mcp",
        help="Put any MCP server's tools behind the guard: callgate gateway --config gateway.yaml",
    ),
    Entry(
        name="load",
        target="analytics.cli:load_command",
        extra="analytics",
        help="Load span files (OTLP JSON lines, plain or gzip; files, directories) into the "
        "database.",
    ),
    Entry(
        name="outcomes",
        target="callgate.outcomes:outcomes",
        extra=None,
        help="Writes whose outcome is unknown: list them, settle one as applied or not applied.",
    ),
    Entry(
        name="replay",
        target="callgate.replay_cli:replay",
        extra="cli",
        help="Run a scenario file of proposed calls (JSON lines) and print one result line per call.",
    ),
    Entry(
        name="report",
        target="analytics.cli:report_command",
        extra="analytics",
        help="Print the metrics: rejections, recovery, replays, loop guards, confirmations, latency.",
    ),
    Entry(
        name="sidecar",
        target="telemetry.cli:sidecar",
        extra="sidecar",
        help="Receive OTLP traces on this host and write them as OTLP JSON lines, like the local "
        "trail.",
    ),
    Entry(
        name="trace",
        target="analytics.cli:trace_command",
        extra="analytics",
        help="Rebuild a call from its trace id: stages, codes, timings, masked arguments, approvals.",
    ),
    Entry(
        name="verify",
        target="telemetry.verify:verify_command",
        extra=None,
        help="Show that span files were not edited: report the first broken, missing or reordered "
        "line.",
    ),
)
"""Every command but ``demo`` (defined below), by name."""

_BY_NAME = {entry.name: entry for entry in COMMANDS}


def import_failure(command: str, extra: str | None, error: ImportError) -> click.ClickException:
    """The one-line error for a command whose import failed: a root package that is not
    callgate's, else the extra to install; a failure neither explains is re-raised."""
    problems = find_problems(ROOTS)
    if problems:
        return click.ClickException(f"callgate {command} cannot start: {problems[0]}")
    missing = (error.name or "").partition(".")[0]
    if extra is not None and missing and missing not in ROOTS:
        return click.ClickException(
            f"callgate {command} needs the [{extra}] extra: pip install 'callgate[{extra}]' "
            f"(no module named {error.name!r})"
        )
    raise error


class LazyGroup(OneLineErrors):
    """A group whose commands in :data:`COMMANDS` are imported on first use."""

    extras: dict[str, str] = {"demo": "demo"}
    """The extras of the commands defined in this module."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an import its extra should have satisfied fails with one line."""
        try:
            return super().invoke(ctx)
        except ImportError as error:
            name = ctx.invoked_subcommand or ""
            entry = _BY_NAME.get(name)
            extra = entry.extra if entry is not None else self.extras.get(name)
            raise import_failure(name, extra, error) from error

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*_BY_NAME, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = _BY_NAME.get(cmd_name)
        if entry is None:
            return self.commands.get(cmd_name)
        module, _, attribute = entry.target.partition(":")
        try:
            command = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            raise import_failure(entry.name, entry.extra, error) from error
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the table, so ``--help`` imports none of them."""
        rows = []
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        for name in self.list_commands(ctx):
            entry = _BY_NAME.get(name)
            command = click.Command(name, help=entry.help) if entry else self.commands[name]
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup)
@click.version_option(package_name="callgate")
def main() -> None:
    """callgate: a deterministic, observable gate between an agent's tool calls and your APIs."""


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
    """Simulated agent traffic through the guard, into span files and DuckDB; report; dashboard.

    \b
    Examples:
      callgate demo
      callgate demo --sessions 500 --no-dashboard --out demo-out/small
      callgate demo --otlp

    Exit codes: 0 done (or stopped with Ctrl-C), 1 a busy port or an unwritable --out, 2 bad options.
    """
    from rich.console import Console

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
