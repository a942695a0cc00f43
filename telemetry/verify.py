"""``callgate verify PATH...``: check the hash chain of span files (``telemetry.chain``)."""

from __future__ import annotations

import click

from telemetry.chain import env_chain_key, verify

__all__ = ["verify_command"]


@click.command("verify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--key-env",
    default="CALLGATE_MASKING_KEY",
    show_default=True,
    metavar="NAME",
    help="Environment variable holding the masking key the files were written with.",
)
def verify_command(paths: tuple[str, ...], key_env: str) -> None:
    """Show that span files were not edited: report the first broken, missing or reordered line.

    Files are read in the order given, directories' *.jsonl[.gz] by name (the writer's order).
    Exit status: 0 when every chain is whole, 1 when a problem was found.
    """
    key = env_chain_key(key_env)
    report = verify(paths, key=key)
    for problem in report.problems:
        click.echo(str(problem))
    checked = f"{report.keyed} with the key" if key is not None else "no key given"
    click.echo(
        f"verify: {report.lines} lines, {len(report.chains)} chains; MACs checked: {checked}"
        f", {report.unkeyed} unkeyed (SHA-256 only), {report.unchecked} keyed but unchecked"
    )
    if report.unchecked:
        click.echo(
            f"verify: {report.unchecked} lines are keyed: set {key_env} to check their MACs",
            err=True,
        )
    if not report.ok:
        click.echo(f"verify: {len(report.problems)} problems", err=True)
        raise SystemExit(1)
    click.echo("verify: OK")
