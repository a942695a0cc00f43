"""``callgate outcomes list|settle``: a human settles the writes whose outcome is unknown.

A write that timed out, or whose attempt died mid-call at a backend that cannot deduplicate, is
recorded with outcome ``unknown``: every repeat replays that answer until ``idempotency_ttl``, so
nothing runs it twice. A tool's ``reconcile=`` status check settles it on the next repeat; for
tools without one (or a backend only a person can ask), an operator checks the backend and
records what it says here. The settled answer replaces the unknown one under the key, and under
the actor's in-flight lock when the unknown is recorded there too, so every later repeat, from
any session, replays it: applied, an OK replay; not applied, the answer a status check gives
(``guard.stages.idempotency.settled``), and the write is not run again under that key.

What it prints goes through ``guard.approval_view.visible``: attacker-shaped text escaped. The
stored result's ``data`` is never printed (it may hold what a tool marks sensitive).
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from typing import Any

import click

from callgate.approvals import STORE_OPTION, opened_stores, writable_option
from guard.approval_view import visible, visible_json
from guard.result import Outcome
from guard.stages.idempotency import settled_by, stored
from guard.stores import KeyRecord, Stores

__all__ = ["outcomes", "settle", "unknown_outcomes"]


def unknown_outcomes(stores: Stores, *, now: float) -> list[KeyRecord]:
    """The writes whose outcome is unknown, oldest first: each key once, its lock left out when
    the key itself is listed (they are one write)."""
    records = stores.idempotency.unknown(now=now)
    keys = {record.key for record in records}
    listed = [r for r in records if r.holder is None or r.holder not in keys]
    return sorted(listed, key=lambda record: (record.claimed_at, record.key))


def settle(stores: Stores, key: str, *, applied: bool, by: str, now: float) -> list[str]:
    """Record the settled outcome of ``key`` and of every lock holding its unknown (or, for a
    lock, its holder's); returns the keys written. ``ValueError`` names the state of a key
    whose outcome is not unknown."""
    record = stores.idempotency.record(key)
    state = _state(record, now)
    if record is None or state != "unknown":
        raise ValueError(f"{visible(key)} is {state}; nothing changed")
    assert record.result is not None
    saved = json.loads(record.result)
    targets = {record.key: record}
    for other in stores.idempotency.unknown(now=now):
        if other.holder == key or other.key == record.holder:
            targets[other.key] = other
    result = settled_by(
        Outcome.APPLIED if applied else Outcome.NOT_APPLIED,
        by=by,
        tool=saved.get("tool"),
        key=record.holder or record.key,
        approval_id=saved.get("approval_id"),
    )
    text = stored(result)
    for target in targets.values():
        # Replayed for what is left of the unknown's replay window: the settled answer stands
        # exactly as long as the unknown one would have.
        ttl = max(target.expires_at - now, 0.0)
        stores.idempotency.complete(target.key, target.fingerprint, text, now=now, ttl=ttl)
    return sorted(targets)


def _state(record: KeyRecord | None, now: float) -> str:
    """What a key holds, in words: unknown (settleable), or why not."""
    if record is None:
        return "not in the store"
    if record.expires_at < now:
        return "expired"
    if record.result is None:
        return "in flight (claimed, no result yet)"
    outcome = json.loads(record.result).get("outcome", "applied")
    if outcome == Outcome.UNKNOWN:
        return "unknown"
    return f"settled ({outcome})"


def _facts(record: KeyRecord) -> dict[str, Any]:
    saved = json.loads(record.result or "{}")
    return {
        "key": record.key,
        "lock_of": record.holder,
        "tool": saved.get("tool"),
        "code": saved.get("code"),
        "approval_id": saved.get("approval_id"),
        "at": _when(record.claimed_at),
        "replayed_until": _when(record.expires_at),
        "message": saved.get("message", ""),
    }


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


_STORE = STORE_OPTION
_WRITABLE = writable_option("settle outcomes")


@click.group()
def outcomes() -> None:
    """Writes whose outcome is unknown: list them, settle one as applied or not applied.

    \b
    Examples:
      callgate outcomes list --store guard.db
      callgate outcomes settle k_3f9a... --applied --by alice --store guard.db

    Exit codes: 0 done, 1 the store cannot be read or the key is not unknown (its state named),
    2 bad options (settle needs --applied or --not-applied).
    """


@outcomes.command("list")
@_STORE
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_WRITABLE
def list_command(store: str | None, as_json: bool, allow_writable: bool) -> None:
    """List the writes whose outcome is unknown, oldest first (hidden characters escaped).

    \b
    Examples:
      callgate outcomes list --store /var/lib/callgate/guard.sqlite
      callgate outcomes list --store redis://127.0.0.1:6379/0 --json

    Exit codes: 0 listed (also when none), 1 no store or an unreadable one, 2 bad options.
    """
    with opened_stores(store, allow_writable) as stores:
        records = unknown_outcomes(stores, now=time.time())
    if as_json:
        for record in records:
            click.echo(visible_json(_facts(record)))
        return
    if not records:
        click.echo("no unknown outcomes")
        return
    for record in records:
        facts = _facts(record)
        lock = f" (lock of {visible(facts['lock_of'])})" if facts["lock_of"] else ""
        click.echo(
            f"{visible(record.key)}{lock}  {visible(str(facts['tool']))}  {facts['at']}  "
            f"{visible(str(facts['code']))}: {visible(facts['message'])}"
        )


@outcomes.command("settle")
@_STORE
@click.argument("key")
@click.option(
    "--applied/--not-applied",
    "applied",
    default=None,
    help="What the backend says: the write took effect, or it did not (one is required).",
)
@click.option("--by", default=None, help="Who settles it (default: $USER).")
@click.option(
    "--trail-dir",
    envvar="CALLGATE_TRAIL_DIR",
    default=None,
    type=click.Path(file_okay=False),
    help="Write the settlement's guard.outcome.settled span to this trail directory (env "
    "CALLGATE_TRAIL_DIR; chained with CALLGATE_MASKING_KEY); none: no span.",
)
@_WRITABLE
def settle_command(
    store: str | None,
    key: str,
    applied: bool | None,
    by: str | None,
    trail_dir: str | None,
    allow_writable: bool,
) -> None:
    """Record the outcome of one unknown write; every later repeat replays it.

    \b
    Examples:
      callgate outcomes settle k_3f2a... --applied --by alice --store guard.sqlite
      callgate outcomes settle k_3f2a... --not-applied --by alice --store redis://127.0.0.1/0

    Exit codes: 0 settled, 1 the key is not unknown (its state is named) or no store,
    2 bad options (neither --applied nor --not-applied).
    """
    if applied is None:
        raise click.UsageError("say what the backend says: --applied or --not-applied")
    who = by or os.environ.get("USER") or os.environ.get("USERNAME") or "operator"
    started = time.time_ns()
    with opened_stores(store, allow_writable) as stores:
        record = stores.idempotency.record(key)
        try:
            written = settle(stores, key, applied=applied, by=who, now=time.time())
        except ValueError as err:
            raise click.ClickException(str(err)) from None
    verdict = "applied" if applied else "not applied"
    click.echo(f"{visible(key)} settled {verdict} by {visible(who)} ({', '.join(written)})")
    if trail_dir is not None and record is not None:
        span = _settled_span(record, trail_dir, applied=applied, by=who, start_ns=started)
        click.echo(f"span {span[0]} written to {visible(span[1])}")


def _settled_span(
    record: KeyRecord, trail_dir: str, *, applied: bool, by: str, start_ns: int
) -> tuple[str, str]:
    """Write the settlement's span to the trail; its trace id and file."""
    from telemetry.masking import Masker
    from telemetry.settlement import settlement_record, write_settlement

    saved = json.loads(record.result or "{}")
    raw = os.environ.get("CALLGATE_MASKING_KEY")
    key = raw.encode() if raw else None
    masker = Masker(key=key or os.urandom(32))
    span = settlement_record(
        masker,
        outcome=str(Outcome.APPLIED if applied else Outcome.NOT_APPLIED),
        key=record.holder or record.key,
        tool=saved.get("tool"),
        by=by,
        approval_id=saved.get("approval_id"),
        start_ns=start_ns,
        end_ns=time.time_ns(),
    )
    path = write_settlement(trail_dir, span, masking_key=key)
    return span.trace_id, str(path)
