"""`read_settings`: arguments over the environment, read once, with no SDK in sight."""

from __future__ import annotations

from pathlib import Path

import pytest

from telemetry.settings import DEFAULT_QUEUE_SIZE, read_settings


class TestResource:
    """The resource the trail and the SDK provider both carry."""

    def test_environment_then_service_name_then_arguments(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """OTEL_RESOURCE_ATTRIBUTES (percent-decoded) < OTEL_SERVICE_NAME < the arguments."""
        monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=pay%2Cments,service.name=env, bad")
        monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
        settings = read_settings(masking_key="k", resource_attributes={"team": "arg"})
        assert settings.resource["service.name"] == "from-env"
        assert settings.resource["team"] == "arg"
        assert read_settings(masking_key="k").resource["team"] == "pay,ments"
        assert read_settings(masking_key="k", service_name="svc").resource["service.name"] == "svc"

    def test_unknown_service_by_default(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without any name the service is `unknown_service`, as the SDK would call it."""
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        assert read_settings(masking_key="k").resource["service.name"] == "unknown_service"


class TestExportChoices:
    """When OTLP is on, and how big its queue is."""

    def test_endpoint_turns_otlp_on_unless_the_host_exports(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An endpoint in the environment means OTLP, except under the host's own provider."""
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        assert read_settings(masking_key="k").otlp is True
        assert read_settings(masking_key="k", host_provider=True).otlp is False
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
        assert read_settings(masking_key="k").otlp is False

    def test_queue_size_from_argument_environment_or_default(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`max_queue_size` beats OTEL_BSP_MAX_QUEUE_SIZE, which beats the default."""
        monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE", raising=False)
        assert read_settings(masking_key="k").max_queue_size == DEFAULT_QUEUE_SIZE
        monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
        assert read_settings(masking_key="k").max_queue_size == 100
        assert read_settings(masking_key="k", max_queue_size=64).max_queue_size == 64

    def test_trail_only_when_asked(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
        """No trail by default; CALLGATE_TRAIL_DIR or `trail=True` turns it on."""
        monkeypatch.delenv("CALLGATE_TRAIL_DIR", raising=False)
        assert read_settings(masking_key="k").trail_dir is None
        assert read_settings(masking_key="k", trail=True).trail_dir == Path("callgate-trail")
        monkeypatch.setenv("CALLGATE_TRAIL_DIR", str(tmp_path))
        assert read_settings(masking_key="k").trail_dir == tmp_path
