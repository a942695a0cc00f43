"""What ``configure()`` was asked for: its arguments over the environment, read once, no wiring.

:func:`read_settings` is the only place that reads ``OTEL_*`` and ``CALLGATE_*`` variables for the
guard's process; :mod:`telemetry.setup` turns the :class:`Settings` into sinks, providers and
exporters. Nothing here imports the OpenTelemetry SDK, so a core install (no ``[otlp]`` extra)
reads the same settings and writes the same trail.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from urllib.parse import unquote

from telemetry.masking import MaskMode

__all__ = ["DEFAULT_QUEUE_SIZE", "TRACES_EXPORTERS", "Settings", "read_settings"]

log = logging.getLogger("telemetry.setup")

TRACES_EXPORTERS = frozenset({"otlp", "console", "none"})
"""The ``OTEL_TRACES_EXPORTER`` values callgate honours."""

DEFAULT_QUEUE_SIZE = 2048
"""The SDK batch processor's queue size when neither the argument nor ``OTEL_BSP_MAX_QUEUE_SIZE``
sets one (the specification's default)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    """Everything ``configure()`` decides before it builds anything."""

    disabled: bool
    """``OTEL_SDK_DISABLED``: the observer does nothing, no trail, no export."""
    version: str
    """callgate's version, for the instrumentation scope ("" in a checkout)."""
    resource: dict[str, str]
    """The resource attributes: ``OTEL_RESOURCE_ATTRIBUTES``, then ``OTEL_SERVICE_NAME``, then the
    arguments; ``service.name`` defaults to ``unknown_service`` as in the SDK."""
    masking_key: bytes
    """The key of every hash callgate writes (random when none was configured)."""
    keyed: bool
    """True when the key came from the deployment; the trail's chain is then keyed."""
    mask_mode: MaskMode
    max_attribute_length: int
    capture_content: bool
    """Arguments also go on the GenAI content attributes (tool arguments and results)."""
    trail_dir: Path | None
    """Where the trail writes; None: no trail."""
    trail_max_bytes: int
    otlp: bool
    """Export over OTLP (or to the caller's ``span_exporter``) through callgate's own provider."""
    otlp_endpoint: str | None
    otlp_protocol: str
    """``grpc`` or ``http/protobuf``."""
    otlp_timeout: float | None
    console: bool
    """``OTEL_TRACES_EXPORTER=console``: spans printed to stdout."""
    max_queue_size: int
    """Spans waiting for the exporter before new ones are dropped (counted)."""
    max_export_batch_size: int | None
    """None: the SDK's own (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` or 512)."""
    metrics: bool
    metrics_over_otlp: bool
    """Metrics go to the OTLP endpoint too (OTLP on, no reader or provider of the caller's)."""


def _package_version() -> str:
    try:
        return version("callgate")
    except PackageNotFoundError:  # pragma: no cover - running from a checkout
        return ""


def _env(name: str) -> str:
    return os.environ.get(name, "").strip()


def _env_flag(name: str) -> bool | None:
    value = _env(name).lower()
    if not value:
        return None
    return value in {"1", "true", "yes", "on"}


def _env_list(name: str) -> list[str]:
    return [item.strip().lower() for item in _env(name).split(",") if item.strip()]


def _env_resource() -> dict[str, str]:
    """``OTEL_RESOURCE_ATTRIBUTES`` (``key=value`` pairs, percent-encoded) and ``OTEL_SERVICE_NAME``."""
    attributes: dict[str, str] = {}
    for pair in _env("OTEL_RESOURCE_ATTRIBUTES").split(","):
        key, sep, value = pair.partition("=")
        if sep and key.strip():
            attributes[key.strip()] = unquote(value.strip())
    if service := _env("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service
    return attributes


def _traces_exporters() -> list[str]:
    names = _env_list("OTEL_TRACES_EXPORTER")
    unknown = [name for name in names if name not in TRACES_EXPORTERS]
    if unknown:
        log.warning(
            "OTEL_TRACES_EXPORTER=%s: callgate knows only %s; ignoring %s",
            ",".join(names),
            ", ".join(sorted(TRACES_EXPORTERS)),
            ", ".join(unknown),
        )
    return names


def read_settings(
    *,
    service_name: str | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    trail: bool | None = None,
    trail_dir: str | os.PathLike[str] | None = None,
    trail_max_bytes: int = 64 * 1024 * 1024,
    otlp: bool | None = None,
    otlp_endpoint: str | None = None,
    otlp_protocol: str | None = None,
    otlp_timeout: float | None = None,
    custom_exporter: bool = False,
    host_provider: bool = False,
    max_queue_size: int | None = None,
    metrics: bool | None = None,
    custom_metrics: bool = False,
    masking_key: bytes | str | None = None,
    mask_mode: MaskMode | str | None = None,
    max_attribute_length: int | None = None,
    capture_content: bool | None = None,
) -> Settings:
    """The settings for ``configure``'s arguments (see there); the environment fills what is None.

    ``custom_exporter``: the caller passed a ``span_exporter``; ``host_provider``: spans go through
    the host's TracerProvider (whose own environment-driven export is then the host's business);
    ``custom_metrics``: the caller passed metric readers or a meter provider.
    """
    key = masking_key if masking_key is not None else _env("CALLGATE_MASKING_KEY")
    keyed = bool(key)
    if not key:
        log.warning(
            "no masking key (CALLGATE_MASKING_KEY): principal and mask hashes will not correlate "
            "across restarts, and the trail's chain is unkeyed; see the README, 'The masking key'"
        )
        key = secrets.token_bytes(32)
    resource = _env_resource() | dict(resource_attributes or {})
    if service_name:
        resource["service.name"] = service_name
    resource.setdefault("service.name", "unknown_service")
    resource.setdefault("telemetry.distro.name", "callgate")

    directory = trail_dir or _env("CALLGATE_TRAIL_DIR") or None
    if trail is None:
        trail = bool(directory)
    exporters = _traces_exporters()
    if otlp is None:
        from_env = bool(
            _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or _env("OTEL_EXPORTER_OTLP_ENDPOINT")
            or "otlp" in exporters
        )
        otlp = bool(otlp_endpoint or custom_exporter or (from_env and not host_provider))
        otlp = otlp and "none" not in exporters
    if metrics is None:
        metrics = bool(custom_metrics or otlp) and "none" not in _env_list("OTEL_METRICS_EXPORTER")
    queue = max_queue_size or int(_env("OTEL_BSP_MAX_QUEUE_SIZE") or DEFAULT_QUEUE_SIZE)
    return Settings(
        disabled=bool(_env_flag("OTEL_SDK_DISABLED")),
        version=_package_version(),
        resource=resource,
        masking_key=key.encode() if isinstance(key, str) else key,
        keyed=keyed,
        mask_mode=MaskMode(mask_mode or _env("CALLGATE_MASK_MODE") or MaskMode.REDACT),
        max_attribute_length=max_attribute_length
        or int(
            _env("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")
            or _env("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")
            or 1024
        ),
        capture_content=bool(
            _env_flag("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            if capture_content is None
            else capture_content
        ),
        trail_dir=Path(directory or "callgate-trail") if trail else None,
        trail_max_bytes=trail_max_bytes,
        otlp=otlp,
        otlp_endpoint=otlp_endpoint,
        otlp_protocol=otlp_protocol
        or _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or _env("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf",
        otlp_timeout=otlp_timeout,
        console="console" in exporters and "none" not in exporters,
        max_queue_size=queue,
        max_export_batch_size=None if max_queue_size is None else min(512, max_queue_size),
        metrics=metrics,
        metrics_over_otlp=otlp and not custom_exporter and not custom_metrics,
    )
