"""One line per error: how every ``callgate`` command reports what went wrong.

Click prints a usage error as four lines (usage, a hint, a blank line, the error). A person at a
terminal or cron reading a mail wants the error and where to look: ``Error: <what>. (callgate
eval --help)``. Other errors a command raises as :class:`click.ClickException` are one line
already; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["OneLineErrors"]


class OneLineErrors(click.Group):
    """A group whose usage errors, like its other errors, take one line on stderr."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else (prog_name or self.name)
            click.echo(f"Error: {exc.format_message()} (see: {where} --help)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except (EOFError, KeyboardInterrupt):
            click.echo(err=True)
            sys.exit(1)
        # Out of standalone mode click returns a command's ``Exit`` code instead of exiting.
        sys.exit(code if isinstance(code, int) else 0)
