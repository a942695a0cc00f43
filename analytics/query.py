"""The seam every metric goes through: filters, backends, and the SQL pieces they share.

A metric builds SQL from :class:`Filters` with :func:`where_clause` and :func:`bucket_expr`, runs
it through a :class:`Backend` (DuckDB here, ClickHouse in :mod:`analytics.clickhouse`), and turns
rows into frozen dataclasses with :func:`rows_as`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar, runtime_checkable

import duckdb

from .dialect import DUCKDB, Dialect

__all__ = [
    "ALL",
    "Backend",
    "DuckDBBackend",
    "Filters",
    "Source",
    "SqlParams",
    "backend_of",
    "bucket_expr",
    "floored_rate",
    "rows_as",
    "where_clause",
]

SqlParams = tuple[str, dict[str, Any]]
"""A query and its named parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Filters:
    """Which calls a metric looks at. Empty tuples mean "all"."""

    start: datetime | None = None
    """Inclusive lower bound on the call's (or stage's) start time, naive UTC."""
    end: datetime | None = None
    """Exclusive upper bound, naive UTC."""
    services: tuple[str, ...] = ()
    """``service.name`` of the process that emitted the spans."""
    tools: tuple[str, ...] = ()
    principals: tuple[str, ...] = ()
    """Pseudonymous principals (``guard.principal``)."""


ALL = Filters()
"""No filter: every call."""


@runtime_checkable
class Backend(Protocol):
    """Something that runs a metric's SQL: the dialect it speaks and a way to fetch rows."""

    dialect: Dialect

    def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run ``sql`` with named ``params``; rows as dicts keyed by column name."""


class DuckDBBackend:
    """A :class:`Backend` over a DuckDB connection to a callgate database."""

    dialect = DUCKDB

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con

    def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run ``sql``; rows as dicts."""
        cursor = self._con.execute(sql, dict(params))
        names = [d[0] for d in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


Source = duckdb.DuckDBPyConnection | Backend
"""What every metric function reads: a DuckDB connection to a callgate database, or a Backend."""


def backend_of(source: Source) -> Backend:
    """The backend for ``source``: a DuckDB connection is wrapped, a Backend used as is."""
    return DuckDBBackend(source) if isinstance(source, duckdb.DuckDBPyConnection) else source


T = TypeVar("T")


def rows_as(cls: type[T], rows: list[dict[str, Any]]) -> list[T]:
    """Rows as instances of the dataclass ``cls``, matched by column name."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    return [cls(**{n: row.get(n) for n in names}) for row in rows]


def where_clause(
    filters: Filters, d: Dialect, *, tools: bool = True, extra: Sequence[str] = ()
) -> SqlParams:
    """The WHERE clause for ``filters`` over ``calls`` or ``stages``, and its parameters."""
    clauses = list(extra)
    params: dict[str, Any] = {}
    if filters.start is not None:
        clauses.append(f"start_time >= {d.param('start', 'timestamp')}")
        params["start"] = d.value(filters.start)
    if filters.end is not None:
        clauses.append(f"start_time < {d.param('end', 'timestamp')}")
        params["end"] = d.value(filters.end)
    groups = [("service", filters.services), ("principal", filters.principals)]
    if tools:
        groups.append(("tool", filters.tools))
    for column, values in groups:
        if values:
            names = [f"{column}_{i}" for i in range(len(values))]
            params.update(zip(names, values, strict=True))
            placeholders = ", ".join(d.param(n, "string") for n in names)
            clauses.append(f"{column} IN ({placeholders})")
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def bucket_expr(d: Dialect, bucket: timedelta | None, column: str = "start_time") -> str:
    """The SQL for the start of ``column``'s time-series bucket; ``NULL`` when not a series."""
    if bucket is None:
        return "NULL"
    seconds = int(bucket.total_seconds())
    if seconds < 1:
        raise ValueError("bucket must be at least one second")
    return d.bucket(column, seconds)


def floored_rate(part: int, whole: int, floor: int) -> float | None:
    """part / whole, or None when whole is below the ``floor`` (too few calls to mean much)."""
    return part / whole if whole and whole >= floor else None
