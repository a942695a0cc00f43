"""Fixtures for the adapter tests: the shop, and callgate's telemetry on an in-memory OTel SDK."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import telemetry
from guard.shop import ShopApp, build_shop
from telemetry import attributes as attr

REFUND = {"order_id": "ORD-1001", "amount_cents": 5000, "currency": "BRL", "reason": "damaged"}
"""The refund every conversation asks for: half of CUS-1's order of 12,000 BRL cents."""


@dataclass
class Traced:
    """An SDK provider with an in-memory exporter, and callgate's telemetry writing to it."""

    provider: TracerProvider
    exporter: InMemorySpanExporter
    telemetry: telemetry.Telemetry

    def spans(self) -> list[ReadableSpan]:
        self.telemetry.observer.force_flush(5)
        return list(self.exporter.get_finished_spans())

    def callgate_calls(self) -> list[ReadableSpan]:
        """callgate's call spans (its stage spans are their children)."""
        return [
            span
            for span in self.spans()
            if span.instrumentation_scope is not None
            and span.instrumentation_scope.name == attr.INSTRUMENTATION_SCOPE
            and span.name.startswith(attr.CALL_SPAN_PREFIX)
        ]


@pytest.fixture
def traced() -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    handle = telemetry.configure(
        trail=False,
        otlp=False,
        metrics=False,
        tracer_provider=provider,
        masking_key="test-key",
        mask_logs=False,  # a process-wide logging filter: not what these tests are about
    )
    yield Traced(provider=provider, exporter=exporter, telemetry=handle)
    handle.shutdown(5)
    provider.shutdown()


@pytest.fixture
def shop() -> ShopApp:
    return build_shop()


@pytest.fixture
def traced_shop(traced: Traced) -> ShopApp:
    return build_shop(observer=traced.telemetry.observer)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
