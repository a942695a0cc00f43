"""Calls from the audit trail as a scenario file for ``callgate replay``: production as regression tests.

Each exported call carries the decision recorded for it as its expectation
(``"expect": {"code": ..., "replayed": ...}``), so ``callgate replay FILE --check`` can list every call
that a changed prompt, tool or policy now decides differently. What a faithful re-run needs and how
the trail provides it:

1. State: a call's checks read what earlier calls did (a refund needs a prior ``get_order``; a
   session's invalid streak; its taint). A selected call's session is exported whole, in order, up to
   its last selected call; the extra calls are marked ``"context": true``.
2. Time: every call is preceded by ``{"at": <epoch seconds>}``, so rate windows, daily limits (per
   UTC day) and approval expiries fall where they fell; a host's marked turns go with each call
   (``"turn"``), so the per-turn ceiling applies as it did.
3. Humans: a decision on a pending action is its own line, ``{"decide": <call id>, "approve": ...}``,
   at the time it was made, expecting the code the resumed call ended with.
4. Who: principals are stored as keyed hashes. Those named with ``principals`` (hashed with the
   deployment's masking key) are written back as ids; calls of any other principal cannot be
   replayed as that principal and are skipped.

Calls that cannot be replayed exactly are listed with the reason and skipped, never guessed:
masked or cut arguments, pseudonymous principals, and calls whose outcome depended on the backend
at that moment (a timeout, an unavailable service, a backend's refusal, a crash). A call that
succeeded after transient retries is kept: without the fault it succeeds at once.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

__all__ = ["ScenarioExport", "SkippedCall", "export_scenario", "pseudonym"]

MASK_TOKEN = re.compile(r"\[(?:REDACTED:[a-z_]+|[a-z_]+:h_[0-9a-f]{6,})\]")
"""What the masker puts where a value was: ``[REDACTED:email]`` or ``[email:h_4f9a0c2e1b3d]``."""

CUT_MARK = "…"
"""What the masker ends a value with when it cut it to the span's length limit."""

ENVIRONMENT_CODES = frozenset(
    {"TIMEOUT", "UPSTREAM_UNAVAILABLE", "UPSTREAM_REJECTED", "INTERNAL_ERROR"}
)
"""Outcomes decided by the backend at that moment, which a replay against a test double cannot reproduce."""


def pseudonym(principal_id: str, key: str) -> str:
    """The principal's keyed hash as spans carry it (``p_`` + 12 hex of HMAC-SHA256)."""
    digest = hmac.digest(key.encode(), principal_id.encode("utf-8", "surrogatepass"), "sha256")
    return "p_" + digest.hex()[:12]


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedCall:
    """A call left out of the scenario, and why."""

    trace_id: str
    session: str
    call_id: str | None
    tool: str | None
    reason: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ScenarioExport:
    """The scenario lines (JSON objects, in order) and the calls that could not be exported."""

    lines: tuple[dict[str, Any], ...]
    calls: int
    skipped: tuple[SkippedCall, ...]


_COLUMNS = (
    "trace_id",
    "start_time",
    "session",
    "principal",
    "role",
    "tool",
    "call_id",
    "arguments",
    "code",
    "replayed",
    "resumed",
    "approval_id",
    "approval_outcome",
    "attempts",
    "turn",
    "turns_marked",
    "step",
)


def export_scenario(
    con: duckdb.DuckDBPyConnection,
    *,
    tools: Sequence[str] = (),
    codes: Sequence[str] = (),
    sessions: Sequence[str] = (),
    since: datetime | None = None,
    until: datetime | None = None,
    principals: Iterable[str] = (),
    key: str | None = None,
) -> ScenarioExport:
    """The selected calls (and their sessions' earlier calls) as replay lines, in time order."""
    selected = _fetch(
        con,
        _where(tools, codes, sessions, since, until),
        _params(tools, codes, sessions, since, until),
    )
    if not selected:
        return ScenarioExport(lines=(), calls=0, skipped=())
    last_selected: dict[str, datetime] = {}
    for row in selected:
        last_selected[row["session"]] = max(
            row["start_time"], last_selected.get(row["session"], row["start_time"])
        )
    chosen = {row["trace_id"] for row in selected}
    rows = [
        row
        for row in _fetch(
            con, "session IN (SELECT unnest($sessions))", {"sessions": sorted(last_selected)}
        )
        if row["start_time"] <= last_selected[row["session"]]
    ]
    names = {pseudonym(p, key): p for p in principals} if key else {}
    return _lines(rows, chosen, names, keyed=key is not None)


def _where(
    tools: Sequence[str],
    codes: Sequence[str],
    sessions: Sequence[str],
    since: datetime | None,
    until: datetime | None,
) -> str:
    parts = ["TRUE"]
    if tools:
        parts.append("tool IN (SELECT unnest($tools))")
    if codes:
        parts.append("code IN (SELECT unnest($codes))")
    if sessions:
        parts.append("session IN (SELECT unnest($sessions))")
    if since is not None:
        parts.append("start_time >= $since")
    if until is not None:
        parts.append("start_time < $until")
    return " AND ".join(parts)


def _params(
    tools: Sequence[str],
    codes: Sequence[str],
    sessions: Sequence[str],
    since: datetime | None,
    until: datetime | None,
) -> dict[str, Any]:
    values = {
        "tools": list(tools),
        "codes": list(codes),
        "sessions": list(sessions),
        "since": since,
        "until": until,
    }
    return {name: value for name, value in values.items() if value}


def _fetch(
    con: duckdb.DuckDBPyConnection, where: str, params: dict[str, Any]
) -> list[dict[str, Any]]:
    cursor = con.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM calls WHERE {where} AND session IS NOT NULL "
        "ORDER BY start_time, session, step, trace_id",
        params,
    )
    return _in_step_order([dict(zip(_COLUMNS, row, strict=True)) for row in cursor.fetchall()])


def _in_step_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Time order across sessions, step order within each: calls made in one clock instant (a
    burst) can carry timestamps out of step, while the step is counted atomically as they enter.
    Each session's proposed calls are sorted by step into the places its proposed calls held; the
    times stay with the places, so they still only move forward."""
    places: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if not row["resumed"]:
            places.setdefault(row["session"], []).append(index)
    ordered = list(rows)
    for indexes in places.values():
        by_step = sorted((rows[i] for i in indexes), key=lambda row: row["step"] or 0)
        for index, row in zip(indexes, by_step, strict=True):
            ordered[index] = row | {"start_time": rows[index]["start_time"]}
    return ordered


def _lines(
    rows: list[dict[str, Any]], chosen: set[str], names: dict[str, str], *, keyed: bool
) -> ScenarioExport:
    lines: list[dict[str, Any]] = []
    skipped: list[SkippedCall] = []
    proposals: dict[str, str] = {}
    """approval id -> the call id of the exported call that asked for it."""
    calls = 0
    for row in rows:
        reason = _unreplayable(row, names, keyed)
        if row["resumed"]:
            proposal = proposals.get(row["approval_id"] or "")
            if proposal is None:
                reason = reason or "its proposal was not exported"
            if reason is not None:
                skipped.append(_skip(row, f"decision: {reason}"))
                continue
            lines.append({"at": _epoch(row["start_time"])})
            lines.append(
                {
                    "decide": proposal,
                    "approve": row["approval_outcome"] != "denied",
                    "expect": {"code": row["code"], "replayed": bool(row["replayed"])},
                }
            )
            calls += 1
            continue
        if reason is not None:
            skipped.append(_skip(row, reason))
            continue
        call_id = row["call_id"] or row["trace_id"]
        line: dict[str, Any] = {
            "session": row["session"],
            "principal": names[row["principal"]],
            "role": row["role"],
            "tool": row["tool"],
            "arguments": row["arguments"],
            "call_id": call_id,
            "expect": {"code": row["code"], "replayed": bool(row["replayed"])},
        }
        if row["turns_marked"] and row["turn"]:  # the host marked turns: replay them marked
            line["turn"] = row["turn"]
        if row["trace_id"] not in chosen:
            line["context"] = True
        if row["approval_outcome"] == "pending" and row["approval_id"]:
            proposals[row["approval_id"]] = call_id
        lines.append({"at": _epoch(row["start_time"])})
        lines.append(line)
        calls += 1
    return ScenarioExport(lines=tuple(lines), calls=calls, skipped=tuple(skipped))


def _unreplayable(row: dict[str, Any], names: dict[str, str], keyed: bool) -> str | None:
    arguments = row["arguments"]
    if row["principal"] not in names:
        if not keyed:
            return "principal is pseudonymous: name it with --principal (and the masking key)"
        return "principal is pseudonymous and not among the --principal ids given"
    if arguments is not None and (MASK_TOKEN.search(arguments) or arguments.endswith(CUT_MARK)):
        return "arguments were masked or cut on the span"
    if row["code"] in ENVIRONMENT_CODES:
        return f"its outcome ({row['code']}) depended on the backend at the time"
    return None


def _epoch(moment: datetime) -> float:
    # The calls table keeps UTC as naive timestamps.
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _skip(row: dict[str, Any], reason: str) -> SkippedCall:
    return SkippedCall(
        trace_id=row["trace_id"],
        session=row["session"],
        call_id=row["call_id"],
        tool=row["tool"],
        reason=reason,
    )


def dumps(line: dict[str, Any]) -> str:
    """One scenario line as JSON text."""
    return json.dumps(line, ensure_ascii=False)
