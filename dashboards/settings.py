"""Where the dashboard reads from: settings passed by ``callgate dashboard`` in the environment.

The command line starts ``streamlit run dashboards/app.py`` in a subprocess; the settings travel
as environment variables rather than script arguments so that a ClickHouse URL with a password
never shows up in ``ps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from analytics.confirmations import DEFAULT_CONFIRMATION_TTL
from analytics.urls import without_password

__all__ = [
    "ALERTS_ENV",
    "CLICKHOUSE_ENV",
    "DB_ENV",
    "DEFAULT_CONFIRMATION_TTL_SECONDS",
    "REFRESH_ENV",
    "STORE_ENV",
    "TTL_ENV",
    "Settings",
]

DB_ENV = "CALLGATE_DASHBOARD_DB"
"""Path of the DuckDB file to read (opened read-only)."""
CLICKHOUSE_ENV = "CALLGATE_DASHBOARD_CLICKHOUSE"
"""ClickHouse URL, e.g. ``http://user:password@host:8123/otel``."""
REFRESH_ENV = "CALLGATE_DASHBOARD_REFRESH"
"""Default auto-refresh interval in seconds; 0 starts with auto-refresh off."""

ALERTS_ENV = "CALLGATE_DASHBOARD_ALERTS"
"""Path of an alert rules file (``callgate alerts --rules``); unset: the built-in rules."""

STORE_ENV = "CALLGATE_DASHBOARD_STORE"
"""The approvals store (SQLite file or Redis URL) the Trace explorer reads deciders' names from."""

TTL_ENV = "CALLGATE_DASHBOARD_CONFIRMATION_TTL"
"""Seconds a pending approval stays open in the deployment (``Policy.confirmation_ttl``)."""

DEFAULT_REFRESH_SECONDS = 10
DEFAULT_CONFIRMATION_TTL_SECONDS = DEFAULT_CONFIRMATION_TTL.total_seconds()
"""The guard's default ``Policy.confirmation_ttl``: older undecided approvals have expired."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """The dashboard's data source and defaults."""

    db: str | None = None
    """DuckDB file; None when reading ClickHouse."""
    clickhouse: str | None = None
    """ClickHouse URL; None when reading DuckDB."""
    refresh_seconds: int = DEFAULT_REFRESH_SECONDS
    """Auto-refresh interval the sidebar starts with (0: off)."""
    confirmation_ttl_seconds: float = DEFAULT_CONFIRMATION_TTL_SECONDS
    """How long an approval stays open: "Pending approvals" counts only those younger."""
    alerts: str | None = None
    """Alert rules file (TOML, :func:`analytics.alerts.load_rules`); None: the built-in rules."""
    store: str | None = None
    """Approvals store (:mod:`analytics.deciders`); None: deciders show as the span's keyed hash."""

    @property
    def confirmation_ttl(self) -> timedelta:
        """:attr:`confirmation_ttl_seconds` as a timedelta."""
        return timedelta(seconds=self.confirmation_ttl_seconds)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read the settings ``to_env`` wrote; unset or blank variables mean "not given"."""
        refresh = environ.get(REFRESH_ENV, "").strip()
        return cls(
            db=environ.get(DB_ENV, "").strip() or None,
            clickhouse=environ.get(CLICKHOUSE_ENV, "").strip() or None,
            refresh_seconds=int(refresh) if refresh.isdigit() else DEFAULT_REFRESH_SECONDS,
            confirmation_ttl_seconds=_seconds(environ.get(TTL_ENV, "")),
            alerts=environ.get(ALERTS_ENV, "").strip() or None,
            store=environ.get(STORE_ENV, "").strip() or None,
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry these settings to the Streamlit process."""
        env = {
            REFRESH_ENV: str(self.refresh_seconds),
            TTL_ENV: repr(self.confirmation_ttl_seconds),
        }
        if self.db:
            env[DB_ENV] = self.db
        if self.clickhouse:
            env[CLICKHOUSE_ENV] = self.clickhouse
        if self.alerts:
            env[ALERTS_ENV] = self.alerts
        if self.store:
            env[STORE_ENV] = self.store
        return env

    def describe(self) -> str:
        """The source for people: the file, or the ClickHouse URL without its password."""
        if self.clickhouse:
            return f"ClickHouse {without_password(self.clickhouse)}"
        if self.db:
            return f"DuckDB {self.db}"
        return "no source"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_CONFIRMATION_TTL_SECONDS
    return value if value > 0 and value != float("inf") else DEFAULT_CONFIRMATION_TTL_SECONDS
