"""``callgate approvals list|show|approve|deny``: a human decides pending actions outside Python.

Works against the store a deployment configured, a SQLite file or a Redis URL, so it serves the MCP
gateway and embedded guards alike. Deciding here only records the decision (atomically: two approvers
racing get one decision); the process that holds the tool resumes the call. The gateway watches its
pending actions and runs an approved one at once; an embedded host calls ``guard.approve``, which
finds the decision already made and runs the call.

What it prints goes through ``guard.approval_view``: sensitive arguments masked, attacker-shaped
text (bidi overrides, newlines, zero-width characters) escaped. A decision that did not change the
action (it was already decided, or another approver won the race) exits 1 and names who decided.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from click.decorators import FC

from guard.approval_view import (
    approval_facts,
    approval_line,
    effective_state,
    visible,
    visible_json,
)
from guard.stores import ApprovalState, PendingAction, Stores, open_sqlite_stores

__all__ = ["approvals", "list_actions", "open_stores", "opened_stores"]


def open_stores(
    spec: str, *, retention: float = 7 * 86_400.0, allow_writable_file: bool = False
) -> Stores:
    """Open the stores named by ``spec``: ``redis://...`` or a SQLite file path.

    A SQLite file is created 0600; one the group or others may write is refused
    (``PermissionError``) unless ``allow_writable_file``."""
    if spec.startswith(("redis://", "rediss://", "unix://")):
        from guard.stores.redis import open_redis_stores

        return open_redis_stores(spec, retention=retention)
    return open_sqlite_stores(spec, retention=retention, allow_writable_file=allow_writable_file)


def list_actions(stores: Stores, *, state: ApprovalState | None = None) -> list[PendingAction]:
    """Every approval the store holds (optionally in one state), newest first."""
    actions = [a for i in stores.approvals.ids() if (a := stores.approvals.get(i)) is not None]
    if state is not None:
        actions = [a for a in actions if effective_state(a) is state]
    return sorted(actions, key=lambda a: a.created_at, reverse=True)


@contextmanager
def opened_stores(store: str | None, allow_writable: bool) -> Iterator[Stores]:
    """The stores ``--store`` (or ``$CALLGATE_STORE``) names, closed on exit; every problem
    opening them is one ``click`` error line (the approvals and outcomes commands share it)."""
    spec = store or os.environ.get("CALLGATE_STORE")
    if not spec:
        raise click.UsageError("name the store: --store PATH_OR_REDIS_URL (or CALLGATE_STORE)")
    if not spec.startswith(("redis://", "rediss://", "unix://")) and not os.path.exists(spec):
        raise click.ClickException(f"no store at {spec}")
    try:
        stores = open_stores(spec, allow_writable_file=allow_writable)
    except PermissionError as err:
        raise click.ClickException(str(err)) from None
    except sqlite3.DatabaseError as err:  # another kind of file: say so, in one line
        raise click.ClickException(f"{spec} is not a callgate store (SQLite): {err}") from None
    try:
        yield stores
    finally:
        stores.close()


STORE_OPTION = click.option(
    "--store",
    envvar="CALLGATE_STORE",
    default=None,
    metavar="PATH|URL",
    help="The SQLite file or redis:// URL the guard or gateway uses (env CALLGATE_STORE).",
)


def writable_option(power: str) -> Callable[[FC], FC]:
    """``--allow-writable-store``, whose help names what a writer of the file could do."""
    return click.option(
        "--allow-writable-store",
        "allow_writable",
        is_flag=True,
        help="Open a SQLite store the group or others may write (refused by default: whoever can "
        f"write it can {power}).",
    )


_STORE = STORE_OPTION
_WRITABLE = writable_option("approve actions")


@click.group()
def approvals() -> None:
    """Pending actions a human must decide: list, show, approve, deny.

    \b
    Examples:
      callgate approvals list --store guard.db
      callgate approvals show apr_1b2c3d --store guard.db
      callgate approvals approve apr_1b2c3d --store redis://127.0.0.1:6379/0 --by alice

    Exit codes: 0 done, 1 the store cannot be read, the approval is unknown, or (approve, deny)
    someone else's decision is the one recorded (named), 2 bad options.
    """


@approvals.command("list")
@_STORE
@click.option(
    "--state",
    type=click.Choice([s.value for s in ApprovalState]),
    default=None,
    help="Only actions in this state (default: all).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_WRITABLE
def list_command(store: str | None, state: str | None, as_json: bool, allow_writable: bool) -> None:
    """List approvals, newest first (sensitive arguments masked, hidden characters escaped)."""
    with opened_stores(store, allow_writable) as stores:
        actions = list_actions(stores, state=ApprovalState(state) if state else None)
    if as_json:
        for action in actions:
            click.echo(visible_json(approval_facts(action)))
        return
    if not actions:
        click.echo("no approvals")
        return
    for action in actions:
        click.echo(approval_line(action))


@approvals.command("show")
@_STORE
@click.argument("approval_id")
@_WRITABLE
def show_command(store: str | None, approval_id: str, allow_writable: bool) -> None:
    """Everything about one approval: the arguments it binds (sensitive ones masked), who asked
    and whether they were identified, the checks' warnings, who decided, expiry."""
    with opened_stores(store, allow_writable) as stores:
        action = stores.approvals.get(approval_id)
    if action is None:
        raise click.ClickException(f"no approval {visible(approval_id)}")
    click.echo(visible_json(approval_facts(action), indent=2))


def _decide(
    store: str | None, approval_id: str, *, approve: bool, by: str, allow_writable: bool
) -> None:
    now = time.time()
    with opened_stores(store, allow_writable) as stores:
        action = stores.approvals.decide(approval_id, approve=approve, by=by, now=now)
    if action is None:
        raise click.ClickException(f"no approval {visible(approval_id)}")
    if not _decided_here(action, by=by, now=now):
        # Already decided (by someone, perhaps the same person earlier), a racing approver won,
        # or it expired: this command changed nothing, and says who did.
        decider = f" (decided by {visible(action.decided_by)})" if action.decided_by else ""
        raise click.ClickException(
            f"{visible(approval_id)} is {effective_state(action, now)}{decider}; nothing changed"
        )
    click.echo(f"{visible(approval_id)} {action.state} by {visible(by)}: {approval_line(action)}")


def _decided_here(action: PendingAction, *, by: str, now: float) -> bool:
    """This command's decision is the one recorded: the store returns a decided action unchanged,
    so a decision taken by anyone else (or by this approver earlier) carries another time."""
    decided = action.state in (ApprovalState.APPROVED, ApprovalState.DENIED)
    return decided and action.decided_by == by and action.decided_at == now


def _approver() -> str:
    return os.environ.get("USER") or os.environ.get("USERNAME") or "operator"


@approvals.command("approve")
@_STORE
@click.argument("approval_id")
@click.option("--by", default=None, help="Who approves (default: $USER).")
@_WRITABLE
def approve_command(
    store: str | None, approval_id: str, by: str | None, allow_writable: bool
) -> None:
    """Approve one pending action; the process holding the tool then runs exactly those arguments."""
    _decide(store, approval_id, approve=True, by=by or _approver(), allow_writable=allow_writable)


@approvals.command("deny")
@_STORE
@click.argument("approval_id")
@click.option("--by", default=None, help="Who denies (default: $USER).")
@_WRITABLE
def deny_command(store: str | None, approval_id: str, by: str | None, allow_writable: bool) -> None:
    """Deny one pending action: it ends CONFIRMATION_DENIED and nothing runs."""
    _decide(store, approval_id, approve=False, by=by or _approver(), allow_writable=allow_writable)
