"""The sidecar's room: the receiver loads no guard module, its core no grpc, and no import circle."""

from __future__ import annotations

import pytest

from .test_imports import loaded_after


class TestSidecarAlone:
    """What importing the sidecar's parts loads, in a fresh interpreter."""

    @pytest.mark.parametrize(
        "statement",
        [
            "from telemetry.sidecar import OTLPReceiver",
            "from telemetry import OTLPReceiver, SpanFileWriter",
            "import telemetry.sidecar.receiver, telemetry.sidecar.pool",
            "import telemetry.cli",
        ],
    )
    def test_the_receiver_loads_no_guard_module(self, statement: str) -> None:
        """The receiver, its workers' module and the command load no guard.* (31 did before)."""
        assert [name for name in loaded_after(statement) if name.startswith("guard")] == []

    @pytest.mark.parametrize(
        "statement",
        [
            "import telemetry.sidecar.ingest",
            "import telemetry.sidecar.pool",
            "import telemetry.spanfile",
            "import telemetry.auth",
            "import telemetry.cli",
        ],
    )
    def test_the_core_loads_no_transport(self, statement: str) -> None:
        """The ingest core, the worker pool, the file writer and the auth rules load no grpc."""
        assert loaded_after(statement) == []

    def test_the_probe_sees_the_transport(self) -> None:
        """The check can fail: the receiver does load grpc, and the trail sink the guard."""
        assert "grpc" in loaded_after("from telemetry.sidecar import OTLPReceiver")
        assert any(name.startswith("guard") for name in loaded_after("import telemetry.trail"))

    @pytest.mark.parametrize(
        "module",
        ["pool", "ingest", "grpc_server", "http_server", "receiver", "wire", "passthrough"],
    )
    def test_each_module_imports_first_on_its_own(self, module: str) -> None:
        """Any module imported first in a fresh interpreter works: no import circle among them."""
        loaded_after(f"import telemetry.sidecar.{module}")


class TestPublicSurface:
    """``telemetry.sidecar``'s one public surface: a sorted ``__all__`` whose every name loads."""

    def test_all_is_sorted_and_resolves(self) -> None:
        """__all__ is in ruff's order (constants, classes, functions) and each name imports."""
        import telemetry.sidecar as sidecar

        names = list(sidecar.__all__)
        assert names == sorted(
            names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
        )
        assert all(getattr(sidecar, name) is not None for name in names)
        with pytest.raises(AttributeError):
            sidecar.TraceReceiver  # noqa: B018  (split into Ingest and grpc_server.TraceService)
