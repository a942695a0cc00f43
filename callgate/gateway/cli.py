"""``callgate gateway``: serve upstream MCP tools behind the guard; ``pin`` re-pins reviewed definitions."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import click

__all__ = ["gateway"]

log = logging.getLogger("callgate.gateway")


def _load(config_path: str) -> Any:
    from callgate.gateway.config import ConfigError, load_config

    try:
        return load_config(config_path)
    except ConfigError as err:
        raise click.ClickException(str(err)) from err


@click.group(invoke_without_command=True)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="The gateway's YAML config.",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="Serve downstream over stdio (one configured principal) or streamable HTTP.",
)
@click.option("--host", default=None, help="HTTP bind address (default: the config's, 127.0.0.1).")
@click.option("--port", type=int, default=None, help="HTTP port (default: the config's).")
@click.pass_context
def gateway(
    ctx: click.Context, config_path: str | None, transport: str, host: str | None, port: int | None
) -> None:
    """Put any MCP server's tools behind the guard: callgate gateway --config gateway.yaml

    \b
    Examples:
      callgate gateway --config gateway.yaml
      callgate gateway --config gateway.yaml --transport http --port 8765
      callgate gateway pin --config gateway.yaml
      callgate gateway demo --workdir gateway-demo

    Exit codes: 0 stopped, 1 the config is refused or an upstream cannot start (one line: which,
    where, why), 2 bad options.
    """
    if ctx.invoked_subcommand is not None:
        return
    if config_path is None:
        raise click.UsageError("--config FILE is required")
    config = _load(config_path)
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )
    if transport == "http" and not config.http.tokens:
        raise click.ClickException(
            "serve.http.tokens is empty: HTTP needs bearer tokens mapped to principals"
        )
    if transport == "http":
        from callgate.gateway.config import ConfigError

        try:  # token variables are read only for HTTP: a stdio gateway starts without them
            config.http.bearer_tokens()
        except ConfigError as err:
            raise click.ClickException(f"{config_path}: {err}") from err
    if transport == "stdio" and config.stdio_principal is None:
        raise click.ClickException(
            "serve.stdio.principal is not set: stdio needs one configured principal"
        )
    with contextlib.suppress(KeyboardInterrupt), _one_line():  # Ctrl-C: an interactive stop
        anyio.run(_serve, config, transport, host, port)


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """A gateway error raised inside the task groups arrives wrapped in exception groups: say its
    one line (upstream, address, cause), not the group's traceback."""
    from callgate.gateway.gateway import GatewayError

    try:
        yield
    except BaseExceptionGroup as group:
        found = _first(group, (GatewayError, click.ClickException))
        if found is None:
            raise
        if isinstance(found, click.ClickException):
            raise found from None
        raise click.ClickException(str(found)) from None


def _first(
    group: BaseExceptionGroup[BaseException], kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    for error in group.exceptions:
        if isinstance(error, kinds):
            return error
        if isinstance(error, BaseExceptionGroup):
            found = _first(error, kinds)
            if found is not None:
                return found
    return None


async def _serve(config: Any, transport: str, host: str | None, port: int | None) -> None:
    import telemetry
    from callgate.gateway.gateway import GatewayError
    from callgate.gateway.run import running, serve_http, serve_stdio

    t = config.telemetry
    handle = telemetry.configure(
        service_name=t.service_name,
        trail=t.trail,
        trail_dir=t.trail_dir,
        otlp=t.otlp_endpoint is not None,
        otlp_endpoint=t.otlp_endpoint,
        otlp_protocol=t.otlp_protocol,
        metrics=False,
    )
    try:
        async with running(config, observer=handle.observer) as gw:
            if transport == "http":

                def ready(bound: int) -> None:
                    click.echo(
                        f"callgate gateway: http://{host or config.http.host}:{bound}{config.http.path}",
                        err=True,
                    )

                await serve_http(gw, host=host, port=port, ready=ready)
            else:
                await serve_stdio(gw)
    except GatewayError as err:
        raise click.ClickException(str(err)) from err
    finally:
        handle.shutdown()


@gateway.command("pin")
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False), required=True
)
@click.option("--by", default=None, help="Who reviewed the definitions (default: $USER).")
@click.option("--yes", is_flag=True, help="Pin without showing each diff and asking.")
@click.argument("tools", nargs=-1)
def pin_command(config_path: str, by: str | None, yes: bool, tools: tuple[str, ...]) -> None:
    """Re-pin reviewed tool definitions (downstream names; none given: every changed one).

    Each change is shown as a diff from the pinned definition, and pinned only when confirmed."""
    import os

    config = _load(config_path)
    if config.store is None:
        raise click.ClickException(
            "the config has no store: pins live in memory and need no re-pinning"
        )
    changed = anyio.run(_pin, config, tools, by or os.environ.get("USER") or "operator", yes)
    if not changed:
        click.echo("nothing to pin: every definition matches its pin")
    for line in changed:
        click.echo(line)


async def _pin(config: Any, wanted: tuple[str, ...], by: str, yes: bool) -> list[str]:
    from callgate.approvals import open_stores
    from callgate.gateway.pins import (
        instructions,
        new_pin,
        open_pin_store,
        owner_pin,
        pin_diff,
        review,
    )
    from callgate.gateway.upstream import Upstream

    opened = open_stores(config.store)
    pins = open_pin_store(config.store, getattr(opened, "client", None))
    done: list[str] = []
    known: set[str] = set()
    try:
        async with anyio.create_task_group() as group:
            for upstream_config in config.upstreams:
                upstream = Upstream(upstream_config)
                try:
                    await upstream.start(group)
                except ConnectionError as err:
                    raise click.ClickException(f"upstream {upstream_config.name!r}: {err}") from err
                for tool in upstream.tools:
                    exposed = upstream_config.exposed(tool.name)
                    known.add(exposed)
                    if wanted and exposed not in wanted:
                        continue
                    definition = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
                    definition.pop("_meta", None)
                    key = f"{upstream_config.name}/{tool.name}"
                    old = pins.get(key)
                    verdict = review(pins, key, exposed, definition, instructions(definition))
                    if not verdict.blocked:
                        continue
                    click.echo(f"{exposed} ({key}): {verdict.why}")
                    for line in pin_diff(old, definition):
                        click.echo(line)
                    if not yes and not click.confirm(f"pin {exposed} as shown?", default=False):
                        continue
                    pin = new_pin(key, definition, by=by)
                    pins.put(pin)
                    pins.put(owner_pin(exposed, key, by=by))
                    done.append(
                        f"pinned {exposed} ({key}) {pin.hash[:12]} by {by}"
                        + (f", was {old.hash[:12]}" if old else "")
                    )
                await upstream.stop()
            group.cancel_scope.cancel()
    finally:
        opened.close()
    unknown = sorted(set(wanted) - known)
    if unknown:
        raise click.ClickException(f"no upstream offers {', '.join(unknown)}")
    return done


@gateway.command("demo")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where the demo writes its config, store and spans (default: a temporary folder).",
)
def demo_command(workdir: str | None) -> None:
    """Show the gateway in action: a real upstream, a real client, every guard decision printed."""
    from callgate.gateway.demo import run_demo

    # Absolute: the demo's config names its store, spans and upstream by path.
    folder = Path(workdir).resolve() if workdir else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    with _one_line():
        for line in run_demo(folder):
            click.echo(json.dumps(line, ensure_ascii=False) if isinstance(line, dict) else line)
