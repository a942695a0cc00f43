"""The scale-out deployment, checked without a Docker engine: what can be checked, is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from callgate.cli import main

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
COLLECTOR = ROOT / "telemetry" / "collector.yaml"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


class TestCompose:
    def test_valid_against_the_compose_specification(self) -> None:
        """docker-compose.yml validates against the Compose Specification's JSON schema."""
        checker = Path(sys.executable).with_name("check-jsonschema")
        done = subprocess.run(
            [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def test_services_and_dependencies(self) -> None:
        """The four services exist and every dependency names one of them."""
        services = load(COMPOSE)["services"]
        assert set(services) == {"clickhouse", "otel-collector", "dashboard", "demo-traffic"}
        for service in services.values():
            depends = service.get("depends_on", [])
            assert set(depends) <= set(services)

    def test_ports_bind_loopback(self) -> None:
        """Published ports bind 127.0.0.1: nothing is exposed beyond the host by default."""
        for service in load(COMPOSE)["services"].values():
            for port in service.get("ports", []):
                assert str(port).startswith("127.0.0.1:"), port

    def test_mounted_files_exist(self) -> None:
        """Bind-mounted files (the collector config) exist in the repository."""
        for service in load(COMPOSE)["services"].values():
            for volume in service.get("volumes", []):
                source = volume.split(":")[0]
                if source.startswith("./"):
                    assert (ROOT / source).is_file(), source

    @pytest.mark.parametrize("service", ["dashboard", "demo-traffic"])
    def test_commands_are_real_callgate_commands(self, service: str) -> None:
        """The compose commands name callgate subcommands and options that exist."""
        argv = load(COMPOSE)["services"][service]["command"]
        assert argv[0] == "callgate"
        command = main.get_command(click.Context(main), argv[1])
        assert command is not None, argv
        options = {
            opt for param in command.params if isinstance(param, click.Option) for opt in param.opts
        }
        used = {arg for arg in argv[2:] if arg.startswith("--")}
        assert used <= options, used - options

    def test_dockerfile_ships_every_package(self) -> None:
        """The image copies every import package and installs the project with the extras its
        services run: the demo, the dashboard over ClickHouse, OTLP over gRPC."""
        text = (ROOT / "Dockerfile").read_text()
        for package in ("guard", "telemetry", "analytics", "dashboards", "callgate"):
            assert f"COPY {package} ./{package}" in text
        assert 'pip install ".[demo,clickhouse,otlp-grpc]"' in text and "USER callgate" in text


class TestCollectorConfig:
    def test_pipelines_use_only_defined_components(self) -> None:
        """Every receiver, processor and exporter a pipeline names is defined, and every defined one is used."""
        config = load(COLLECTOR)
        used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
        for pipeline in config["service"]["pipelines"].values():
            for kind in used:
                used[kind] |= set(pipeline.get(kind, []))
        for kind, names in used.items():
            assert names == set(config[kind]), kind
        assert set(config["service"]["extensions"]) == set(config["extensions"])

    def test_memory_limiter_comes_first_and_batch_last(self) -> None:
        """The memory limiter refuses before anything buffers; batching is the last processor."""
        processors = load(COLLECTOR)["service"]["pipelines"]["traces"]["processors"]
        assert processors[0] == "memory_limiter" and processors[-1] == "batch"

    def test_redaction_catches_canaries(self) -> None:
        """The redaction processor's patterns match the canary values a leak would carry."""
        patterns = [
            re.compile(p) for p in load(COLLECTOR)["processors"]["redaction"]["blocked_values"]
        ]
        canaries = [
            "4111 1111 1111 1111",
            "jane.doe@example.com",
            "Bearer abc.def.ghi",
            "sk-live0123456789abcdefXYZ",
            "AKIAABCDEFGHIJKLMNOP",
        ]
        for canary in canaries:
            assert any(p.search(canary) for p in patterns), canary
        assert not any(p.search("ORD-1001") for p in patterns)

    def test_clickhouse_exporter_writes_otel_traces(self) -> None:
        """The ClickHouse exporter writes the table the ClickHouse metrics read."""
        exporter = load(COLLECTOR)["exporters"]["clickhouse"]
        assert exporter["traces_table_name"] == "otel_traces" and exporter["database"] == "otel"

    def test_file_exporter_writes_json(self) -> None:
        """The file exporter writes OTLP JSON, the format `callgate load` reads."""
        exporter = load(COLLECTOR)["exporters"]["file"]
        assert exporter["format"] == "json"
