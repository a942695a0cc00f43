"""``callgate verify PATH...``: check the hash chain of span files (``telemetry.chain``)."""

from __future__ import annotations

import click

from telemetry.chain import ChainReport, env_chain_key, verify

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
@click.option(
    "--allow-unkeyed",
    is_flag=True,
    help="With a key, accept lines chained without it (SHA-256 only: anyone could write them).",
)
def verify_command(paths: tuple[str, ...], key_env: str, allow_unkeyed: bool) -> None:
    """Show that span files were not edited: report the first broken, missing or reordered line.

    Reads the files `callgate load` would read from the same PATHs (a directory's *.json, *.jsonl
    and *.ndjson, plain or gzip; a file with its rotated siblings). With the key, every line must
    carry a MAC made with it.

    \b
    Examples:
      CALLGATE_MASKING_KEY=... callgate verify callgate-trail/
      callgate verify sidecar-spans/ --allow-unkeyed

    Exit codes: 0 every chain is whole, 1 a problem was found (each named), 2 bad options.
    """
    key = env_chain_key(key_env)
    report = verify(paths, key=key, allow_unkeyed=allow_unkeyed)
    for problem in report.problems:
        click.echo(str(problem))
    checked = f"{report.keyed} with the key" if key is not None else "no key given"
    click.echo(
        f"verify: {report.lines} lines in {report.files} files, {len(report.chains)} chains;"
        f" MACs checked: {checked}, {report.unkeyed} unkeyed (SHA-256 only),"
        f" {report.unchecked} keyed but unchecked"
    )
    if not report.ok:
        if key is not None and any(p.reason.startswith("unkeyed") for p in report.problems):
            click.echo(
                "verify: unkeyed lines prove nothing about who wrote them;"
                " --allow-unkeyed accepts them",
                err=True,
            )
        click.echo(f"verify: {len(report.problems)} problems", err=True)
        raise SystemExit(1)
    click.echo(f"verify: OK: {_proof(report, key_env, keyed=key is not None)}")


def _proof(report: ChainReport, key_env: str, *, keyed: bool) -> str:
    """What this clean report shows, in one sentence."""
    if keyed and not report.unkeyed:
        return "every line was written, in this order, by a holder of the key"
    if keyed:
        return (
            f"the {report.keyed} keyed lines were written in order by a holder of the key;"
            f" the {report.unkeyed} unkeyed ones (accepted) show damage, not a deliberate edit"
        )
    return (
        f"the chains are whole, which shows damage, not a deliberate edit:"
        f" set {key_env} to check the MACs"
    )
