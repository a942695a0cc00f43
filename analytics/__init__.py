"""callgate analytics: span files into DuckDB, the metrics as SQL, trace reconstruction, ClickHouse.

Knows the span contract (``telemetry.attributes``), never the guard's classes. The modules:
``schema`` (DDL), ``load`` (incremental loader, with ``otlp``: the parsing SQL), ``metrics`` (one
query per metric; by theme in ``rejections``, ``recovery``, ``confirmations``, ``latency``, over
``query`` and ``dialect``),
``reconstruct`` (traces, sessions, call ids), ``database`` (opening a database: one context
manager, clear errors), ``clickhouse`` (the same metrics over
``otel_traces``), ``parquet`` (export by day), ``cli`` (the commands) and ``render`` (their output), ``synth`` (synthetic span
files for tests, demos and the benchmark).

``load`` is not re-exported: ``analytics.load`` stays the module (``analytics.load.load(con, paths)``).
"""

from .advisories import WarningCount, warning_counts
from .cli import analytics_cli, export_command, load_command, report_command, trace_command
from .database import (
    DEFAULT_DB,
    DatabaseBusyError,
    DatabaseError,
    NoDatabaseError,
    NotADatabaseError,
    open_database,
)
from .follow import follow
from .load import FileReport, ForeignFileError, LoadReport, connect, discover_files
from .metrics import (
    Backend,
    CallCount,
    ConfirmationFunnel,
    DuckDBBackend,
    FilterOptions,
    Filters,
    InvalidField,
    LoopGuard,
    Overview,
    Recovery,
    RejectionRate,
    Replays,
    StageLatency,
    StuckSession,
    call_counts,
    confirmation_funnel,
    filter_options,
    invalid_fields,
    loop_guards,
    overview,
    recovery_rate,
    rejection_rate,
    replays,
    stage_latency,
    stuck_sessions,
)
from .parquet import ParquetExport, export_parquet
from .reconstruct import (
    AmbiguousIdError,
    CallSummary,
    Event,
    SpanNode,
    TraceView,
    calls_by_call_id,
    calls_with_code,
    resolve_id,
    session_calls,
    tainting_call,
    to_jsonable,
    trace,
    value_source_call,
)
from .shadow import WouldHaveRejected, would_have_rejected, would_have_waited

__all__ = [
    "DEFAULT_DB",
    "AmbiguousIdError",
    "Backend",
    "CallCount",
    "CallSummary",
    "ConfirmationFunnel",
    "DatabaseBusyError",
    "DatabaseError",
    "DuckDBBackend",
    "Event",
    "FileReport",
    "FilterOptions",
    "Filters",
    "ForeignFileError",
    "InvalidField",
    "LoadReport",
    "LoopGuard",
    "NoDatabaseError",
    "NotADatabaseError",
    "Overview",
    "ParquetExport",
    "Recovery",
    "RejectionRate",
    "Replays",
    "SpanNode",
    "StageLatency",
    "StuckSession",
    "TraceView",
    "WarningCount",
    "WouldHaveRejected",
    "analytics_cli",
    "call_counts",
    "calls_by_call_id",
    "calls_with_code",
    "confirmation_funnel",
    "connect",
    "discover_files",
    "export_command",
    "export_parquet",
    "filter_options",
    "follow",
    "invalid_fields",
    "load_command",
    "loop_guards",
    "open_database",
    "overview",
    "recovery_rate",
    "rejection_rate",
    "replays",
    "report_command",
    "resolve_id",
    "session_calls",
    "stage_latency",
    "stuck_sessions",
    "tainting_call",
    "to_jsonable",
    "trace",
    "trace_command",
    "value_source_call",
    "warning_counts",
    "would_have_rejected",
    "would_have_waited",
]
