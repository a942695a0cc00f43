"""Alert rules: a metric over a window, compared with a threshold, on DuckDB or ClickHouse.

A rule names one of :data:`METRICS`, optionally a tool and a code, a window (``15m``) and a
threshold (``above`` or ``below``). :func:`evaluate` computes the metric over the window that ends
at ``now`` (default: the latest call stored, the data's clock, as for pending approvals) and over
the window before it, so every result carries its change; a rule fires when the current value
crosses its threshold and the window holds at least ``min_calls`` calls.

Every metric is computed by the same query functions as ``callgate report`` and the dashboard
(:mod:`analytics.gates`, :mod:`analytics.recovery`, :mod:`analytics.call_latency`), so an alert,
a report line and a tile can never disagree. Rules live in a small TOML file (docs/metrics.md,
"Alerts"); without one, :data:`DEFAULT_RULES` apply.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import call_latency, gates
from .confirmations import DEFAULT_CONFIRMATION_TTL, data_now
from .query import Filters, Source, backend_of, where_clause
from .recovery import FIXABLE_DEFAULT_K, LOOP_GUARD_CODES, recovery_rate

__all__ = [
    "DEFAULT_RULES",
    "METRICS",
    "AlertResult",
    "Rule",
    "RulesError",
    "evaluate",
    "load_rules",
    "parse_window",
]

MetricName = Literal[
    "calls",
    "rejection_rate",
    "model_error_rate",
    "policy_refusal_rate",
    "human_gate_rate",
    "upstream_failure_rate",
    "code_calls",
    "code_rate",
    "recovery_rate",
    "loop_guards",
    "unknown_outcomes",
    "pending_approvals",
    "pending_approvals_growth",
    "p99_call_ms",
]

METRICS: dict[str, str] = {
    "calls": "calls in the window",
    "rejection_rate": "calls not OK / calls (every kind, gates included)",
    "model_error_rate": "model errors / calls (analytics.gates)",
    "policy_refusal_rate": "policy refusals / calls",
    "human_gate_rate": "human gates / calls",
    "upstream_failure_rate": "upstream failures / calls",
    "code_calls": "calls that ended with `code`",
    "code_rate": "calls that ended with `code` / calls",
    "recovery_rate": "model errors followed by a valid call within 3 calls / model errors",
    "loop_guards": "calls stopped by LOOP_DETECTED, STEP_LIMIT or VALIDATION_BUDGET_EXHAUSTED",
    "unknown_outcomes": "writes whose outcome is unknown (TIMEOUT after the request may have run)",
    "pending_approvals": "approvals still open at the window's end (the confirmation TTL applies)",
    "pending_approvals_growth": "open approvals at the window's end minus at its start",
    "p99_call_ms": "99th percentile of the call's duration, milliseconds",
}
"""Every metric a rule may name, with its definition."""

_WINDOW = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_window(text: str) -> timedelta:
    """``15m`` -> 15 minutes; a positive number and one of s, m, h, d."""
    match = _WINDOW.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r}: use a positive number and s, m, h or d, e.g. 15m")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


class RulesError(ValueError):
    """A rules file that cannot be read or does not validate; the message names the place."""


Threshold = Annotated[float, Field(allow_inf_nan=False)]


class Rule(BaseModel):
    """One alert: ``metric`` over ``window`` (for ``tool``, ``code``) above or below a threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(min_length=1, max_length=200)
    metric: MetricName
    window: str = "15m"
    """How far back from ``now`` the metric looks, e.g. ``15m``, ``1h``, ``1d``."""
    tool: str | None = None
    code: str | None = None
    """Only for ``code_calls`` and ``code_rate``: the reason code counted."""
    above: Threshold | None = None
    below: Threshold | None = None
    min_calls: int = Field(default=0, ge=0)
    """The window must hold at least this many calls for the rule to fire (rates of 3 calls lie)."""

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        parse_window(value)
        return value

    @model_validator(mode="after")
    def _one_threshold_and_code(self) -> Rule:
        if (self.above is None) == (self.below is None):
            raise ValueError("give exactly one of `above` or `below`")
        if (self.code is not None) != self.metric.startswith("code_"):
            raise ValueError("`code` goes with the metrics code_calls and code_rate, and only them")
        return self

    @property
    def span(self) -> timedelta:
        """:attr:`window` as a timedelta."""
        return parse_window(self.window)

    def fires(self, value: float | None) -> bool:
        """Whether ``value`` crosses the threshold (no value never fires)."""
        if value is None:
            return False
        return value > self.above if self.above is not None else value < (self.below or 0.0)

    def describe(self) -> str:
        """``loop_guards > 0 over 15m (tool get_order)``."""
        threshold = self.above if self.above is not None else self.below
        shown = f"{threshold:.1%}" if self.metric.endswith("_rate") else f"{threshold:g}"
        limit = f"> {shown}" if self.above is not None else f"< {shown}"
        scope = ", ".join(
            f"{k} {v}" for k, v in (("tool", self.tool), ("code", self.code)) if v is not None
        )
        return f"{self.metric} {limit} over {self.window}" + (f" ({scope})" if scope else "")


class _RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    rule: list[Rule] = Field(min_length=1)


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule(name="loop guards", metric="loop_guards", window="15m", above=0),
    Rule(
        name="upstream failures", metric="upstream_failure_rate", window="15m", above=0.05,
        min_calls=20,
    ),
    Rule(name="unknown outcomes", metric="unknown_outcomes", window="1h", above=0),
    Rule(name="pending approvals growing", metric="pending_approvals_growth", window="1h", above=0),
)  # fmt: skip
"""What ``callgate alerts`` checks without ``--rules``: loops, a failing API, writes nobody can
say ran, and a queue of approvals nobody works."""


def load_rules(path: Path) -> tuple[Rule, ...]:
    """The ``[[rule]]`` tables of a TOML file; :class:`RulesError` names what is wrong."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RulesError(f"{path}: cannot read the rules file ({exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path}: not TOML: {exc}") from exc
    try:
        rules = _RulesFile.model_validate(raw).rule
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RulesError(f"{path}: {where}: {first['msg']}") from None
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise RulesError(f"{path}: two rules share a name; names must be unique")
    return tuple(rules)


@dataclass(frozen=True, kw_only=True, slots=True)
class AlertResult:
    """A rule evaluated: its value now and over the previous window, and whether it fires."""

    rule: Rule
    value: float | None
    """The metric over the window ending at ``now`` (None: no calls to compute a rate over)."""
    previous: float | None
    """The same metric over the window before."""
    calls: int
    """Calls in the window (for ``min_calls``)."""
    firing: bool
    now: datetime

    @property
    def change(self) -> float | None:
        """``value - previous`` when both exist."""
        if self.value is None or self.previous is None:
            return None
        return self.value - self.previous


_Compute = Callable[[Source, Filters, Rule, datetime, timedelta], float | None]


def _rate(kind: str) -> _Compute:
    def compute(
        source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
    ) -> float | None:
        rows = gates.gate_rates(source, filters)
        return rows[0].rate(kind) if rows else None

    return compute


def _rejection_rate(
    source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
) -> float | None:
    rows = gates.gate_rates(source, filters)
    return rows[0].rejected / rows[0].calls if rows else None


def _count(extra: Callable[[Rule], str]) -> _Compute:
    def compute(
        source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
    ) -> float | None:
        return float(_calls(source, filters, extra(rule)))

    return compute


def _code_rate(
    source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
) -> float | None:
    total = _calls(source, filters, None)
    return _calls(source, filters, _code_is(rule)) / total if total else None


def _code_is(rule: Rule) -> str:
    return "code = " + _quote(rule.code or "")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _pending(source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta) -> float:
    return float(
        gates.pending_approvals(source, replace(filters, start=None), ttl=ttl, now=now).open
    )


def _pending_growth(
    source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
) -> float:
    start = now - rule.span
    before = _pending(source, replace(filters, end=start), rule, start, ttl)
    return _pending(source, filters, rule, now, ttl) - before


def _recovery(
    source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
) -> float | None:
    rows = recovery_rate(source, filters, k=FIXABLE_DEFAULT_K)
    rejected = sum(r.rejected for r in rows)
    return sum(r.recovered for r in rows) / rejected if rejected else None


def _p99(
    source: Source, filters: Filters, rule: Rule, now: datetime, ttl: timedelta
) -> float | None:
    rows = call_latency.call_latency(source, filters)
    return max((r.p99_ms for r in rows), default=None)


_LOOP_CODES = "code IN (" + ", ".join(_quote(c) for c in LOOP_GUARD_CODES) + ")"

_COMPUTE: dict[str, _Compute] = {
    "calls": _count(lambda rule: ""),
    "rejection_rate": _rejection_rate,
    "model_error_rate": _rate("model_error"),
    "policy_refusal_rate": _rate("policy_refusal"),
    "human_gate_rate": _rate("human_gate"),
    "upstream_failure_rate": _rate("upstream_failure"),
    "code_calls": _count(_code_is),
    "code_rate": _code_rate,
    "recovery_rate": _recovery,
    "loop_guards": _count(lambda rule: _LOOP_CODES),
    "unknown_outcomes": _count(lambda rule: "outcome = 'unknown'"),
    "pending_approvals": _pending,
    "pending_approvals_growth": _pending_growth,
    "p99_call_ms": _p99,
}


def _calls(source: Source, filters: Filters, condition: str | None) -> int:
    b = backend_of(source)
    where, params = where_clause(filters, b.dialect, extra=[condition] if condition else [])
    [row] = b.fetch(f"SELECT count(*) AS calls FROM {b.dialect.calls} {where}", params)
    return int(row["calls"] or 0)


def evaluate(
    source: Source,
    rules: Sequence[Rule] = DEFAULT_RULES,
    *,
    now: datetime | None = None,
    confirmation_ttl: timedelta = DEFAULT_CONFIRMATION_TTL,
    filters: Filters | None = None,
) -> list[AlertResult]:
    """Each rule over its window ending at ``now`` and the window before; firing ones first."""
    now = now if now is not None else data_now(source)
    if now is None:
        return []
    # The window is [now - span, now]; the end bound is exclusive, so step past the last call.
    end = now + timedelta(microseconds=1)
    base = filters or Filters()
    out: list[AlertResult] = []
    for rule in rules:
        scoped = replace(base, tools=(rule.tool,)) if rule.tool else base
        current = replace(scoped, start=end - rule.span, end=end)
        earlier = replace(scoped, start=end - 2 * rule.span, end=end - rule.span)
        compute = _COMPUTE[rule.metric]
        value = _finite(compute(source, current, rule, now, confirmation_ttl))
        previous = _finite(compute(source, earlier, rule, now - rule.span, confirmation_ttl))
        calls = _calls(source, current, None)
        out.append(
            AlertResult(
                rule=rule,
                value=value,
                previous=previous,
                calls=calls,
                firing=calls >= rule.min_calls and rule.fires(value),
                now=now,
            )
        )
    out.sort(key=lambda r: not r.firing)
    return out


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
