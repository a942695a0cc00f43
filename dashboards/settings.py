"""Where the dashboard reads from: settings passed by ``callgate dashboard`` in the environment.

The command line starts ``streamlit run dashboards/app.py`` in a subprocess; the settings travel
as environment variables rather than script arguments so that a ClickHouse URL with a password
never shows up in ``ps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

__all__ = ["CLICKHOUSE_ENV", "DB_ENV", "REFRESH_ENV", "Settings"]

DB_ENV = "CALLGATE_DASHBOARD_DB"
"""Path of the DuckDB file to read (opened read-only)."""
CLICKHOUSE_ENV = "CALLGATE_DASHBOARD_CLICKHOUSE"
"""ClickHouse URL, e.g. ``http://user:password@host:8123/otel``."""
REFRESH_ENV = "CALLGATE_DASHBOARD_REFRESH"
"""Default auto-refresh interval in seconds; 0 starts with auto-refresh off."""

DEFAULT_REFRESH_SECONDS = 10


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """The dashboard's data source and defaults."""

    db: str | None = None
    """DuckDB file; None when reading ClickHouse."""
    clickhouse: str | None = None
    """ClickHouse URL; None when reading DuckDB."""
    refresh_seconds: int = DEFAULT_REFRESH_SECONDS
    """Auto-refresh interval the sidebar starts with (0: off)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read the settings ``to_env`` wrote; unset or blank variables mean "not given"."""
        refresh = environ.get(REFRESH_ENV, "").strip()
        return cls(
            db=environ.get(DB_ENV, "").strip() or None,
            clickhouse=environ.get(CLICKHOUSE_ENV, "").strip() or None,
            refresh_seconds=int(refresh) if refresh.isdigit() else DEFAULT_REFRESH_SECONDS,
        )

    def to_env(self) -> dict[str, str]:
        """The environment variables that carry these settings to the Streamlit process."""
        env = {REFRESH_ENV: str(self.refresh_seconds)}
        if self.db:
            env[DB_ENV] = self.db
        if self.clickhouse:
            env[CLICKHOUSE_ENV] = self.clickhouse
        return env

    def describe(self) -> str:
        """The source for people: the file, or the ClickHouse URL without its password."""
        if self.clickhouse:
            return f"ClickHouse {_without_password(self.clickhouse)}"
        if self.db:
            return f"DuckDB {self.db}"
        return "no source"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    netloc = f"{parts.username}:***@{host}" if parts.username else host
    return urlunsplit(parts._replace(netloc=netloc))
