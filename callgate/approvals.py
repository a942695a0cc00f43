"""``callgate approvals list|show|approve|deny``: a human decides pending actions outside Python.

Works against the store a deployment configured, a SQLite file or a Redis URL, so it serves the MCP
gateway and embedded guards alike. Deciding here only records the decision (atomically: two approvers
racing get one decision); the process that holds the tool resumes the call. The gateway watches its
pending actions and runs an approved one at once; an embedded host calls ``guard.approve``, which
finds the decision already made and runs the call.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import click

from guard.stores import ApprovalState, PendingAction, Stores, open_sqlite_stores

__all__ = ["approvals", "list_actions", "open_stores"]


def open_stores(spec: str, *, retention: float = 7 * 86_400.0) -> Stores:
    """Open the stores named by ``spec``: ``redis://...`` or a SQLite file path."""
    if spec.startswith(("redis://", "rediss://", "unix://")):
        from guard.stores.redis import open_redis_stores

        return open_redis_stores(spec, retention=retention)
    return open_sqlite_stores(spec, retention=retention)


def list_actions(stores: Stores, *, state: ApprovalState | None = None) -> list[PendingAction]:
    """Every approval the store holds (optionally in one state), newest first."""
    actions = [a for i in stores.approvals.ids() if (a := stores.approvals.get(i)) is not None]
    if state is not None:
        actions = [a for a in actions if _effective_state(a) is state]
    return sorted(actions, key=lambda a: a.created_at, reverse=True)


def _effective_state(action: PendingAction, now: float | None = None) -> ApprovalState:
    """A pending action past its expiry is expired, whether or not anyone tried to decide it."""
    now = time.time() if now is None else now
    if action.state is ApprovalState.PENDING and action.expires_at < now:
        return ApprovalState.EXPIRED
    return action.state


def describe(action: PendingAction) -> dict[str, Any]:
    """The action as an approver reads it: who, what, the exact arguments, when, and its state."""
    return {
        "id": action.id,
        "state": str(_effective_state(action)),
        "tool": action.tool,
        "arguments": json.loads(action.arguments),
        "reason": action.reason,
        "principal": action.principal_id,
        "role": action.role,
        "session": action.session_id,
        "created_at": _when(action.created_at),
        "expires_at": _when(action.expires_at),
        "decided_by": action.decided_by,
        "decided_at": _when(action.decided_at) if action.decided_at is not None else None,
    }


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@contextmanager
def _opened(store: str | None) -> Iterator[Stores]:
    spec = store or os.environ.get("CALLGATE_STORE")
    if not spec:
        raise click.UsageError("name the store: --store PATH_OR_REDIS_URL (or CALLGATE_STORE)")
    if not spec.startswith(("redis://", "rediss://", "unix://")) and not os.path.exists(spec):
        raise click.ClickException(f"no store at {spec}")
    stores = open_stores(spec)
    try:
        yield stores
    finally:
        stores.close()


_STORE = click.option(
    "--store",
    envvar="CALLGATE_STORE",
    default=None,
    metavar="PATH|URL",
    help="The SQLite file or redis:// URL the guard or gateway uses (env CALLGATE_STORE).",
)


@click.group()
def approvals() -> None:
    """Pending actions a human must decide: list, show, approve, deny."""


@approvals.command("list")
@_STORE
@click.option(
    "--state",
    type=click.Choice([s.value for s in ApprovalState]),
    default=None,
    help="Only actions in this state (default: all).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def list_command(store: str | None, state: str | None, as_json: bool) -> None:
    """List approvals, newest first."""
    with _opened(store) as stores:
        actions = list_actions(stores, state=ApprovalState(state) if state else None)
    if as_json:
        for action in actions:
            click.echo(json.dumps(describe(action), ensure_ascii=False))
        return
    if not actions:
        click.echo("no approvals")
        return
    for action in actions:
        info = describe(action)
        decided = f" by {info['decided_by']}" if info["decided_by"] else ""
        click.echo(
            f"{info['id']}  {info['state']:<8}{decided}  {info['tool']}  "
            f"{action.arguments}  expires {info['expires_at']}"
        )


@approvals.command("show")
@_STORE
@click.argument("approval_id")
def show_command(store: str | None, approval_id: str) -> None:
    """Everything about one approval: the exact arguments it binds, who asked, who decided, expiry."""
    with _opened(store) as stores:
        action = stores.approvals.get(approval_id)
    if action is None:
        raise click.ClickException(f"no approval {approval_id}")
    click.echo(json.dumps(describe(action), indent=2, ensure_ascii=False))


def _decide(store: str | None, approval_id: str, *, approve: bool, by: str) -> None:
    with _opened(store) as stores:
        action = stores.approvals.decide(approval_id, approve=approve, by=by, now=time.time())
    if action is None:
        raise click.ClickException(f"no approval {approval_id}")
    wanted = ApprovalState.APPROVED if approve else ApprovalState.DENIED
    if action.state is not wanted:
        raise click.ClickException(
            f"{approval_id} is {action.state}"
            + (f" (decided by {action.decided_by})" if action.decided_by else "")
            + "; nothing changed"
        )
    click.echo(f"{approval_id} {action.state} by {by}: {action.tool} {action.arguments}")


def _approver() -> str:
    return os.environ.get("USER") or os.environ.get("USERNAME") or "operator"


@approvals.command("approve")
@_STORE
@click.argument("approval_id")
@click.option("--by", default=None, help="Who approves (default: $USER).")
def approve_command(store: str | None, approval_id: str, by: str | None) -> None:
    """Approve one pending action; the process holding the tool then runs exactly those arguments."""
    _decide(store, approval_id, approve=True, by=by or _approver())


@approvals.command("deny")
@_STORE
@click.argument("approval_id")
@click.option("--by", default=None, help="Who denies (default: $USER).")
def deny_command(store: str | None, approval_id: str, by: str | None) -> None:
    """Deny one pending action: it ends CONFIRMATION_DENIED and nothing runs."""
    _decide(store, approval_id, approve=False, by=by or _approver())
