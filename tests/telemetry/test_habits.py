"""OpenTelemetry habits: the app's global provider, OTEL_TRACES_EXPORTER, no files unless asked."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from telemetry import configure

from .conftest import KEY, make_call

ROOT = Path(__file__).resolve().parents[2]


def run_child(
    body: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh interpreter (the global provider can be set once per process)."""
    script = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n" + textwrap.dedent(body)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CALLGATE_"))}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
        env=environment, cwd=cwd, check=False,
    )  # fmt: skip


class TestGlobalProvider:
    """With no provider argument, callgate's spans go through the app's global one, nested."""

    def test_call_span_nests_under_the_span_current_at_call_start(self) -> None:
        """The call span's parent is the app's span that was current when the call started."""
        done = run_child(
            f"""
            import json
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import SimpleSpanProcessor
            from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
            from tests.telemetry.conftest import make_call
            import telemetry

            exported = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exported))
            trace.set_tracer_provider(provider)
            handle = telemetry.configure(trail=False, masking_key={KEY!r}, metrics=False)
            tracer = trace.get_tracer("app")
            call, result = make_call()
            with tracer.start_as_current_span("tool node") as node:
                handle.observer.call_started(call)
            handle.observer.call_ended(call, result)  # ends after the framework's span closed
            handle.shutdown()
            spans = {{s.name: s for s in exported.get_finished_spans()}}
            head = spans["execute_tool pay"]
            print(json.dumps(dict(
                parent=format(head.parent.span_id, "016x") if head.parent else None,
                node=format(node.get_span_context().span_id, "016x"),
                same_trace=head.context.trace_id == node.get_span_context().trace_id,
                stages=sum(name.startswith("guard.") for name in spans),
                files=handle.trail_files,
            )))
            """
        )
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        assert outcome["parent"] == outcome["node"]
        assert outcome["same_trace"] is True
        assert outcome["stages"] == 9
        assert outcome["files"] == []

    def test_env_otlp_is_the_apps_when_it_has_a_provider(self) -> None:
        """An OTLP endpoint in the environment does not make callgate export twice."""
        done = run_child(
            f"""
            from opentelemetry import trace
            from opentelemetry.sdk.trace import TracerProvider
            import telemetry
            trace.set_tracer_provider(TracerProvider())
            handle = telemetry.configure(trail=False, masking_key={KEY!r}, metrics=False)
            print(handle.tracer_provider is None, len(handle.observer.sinks))
            """,
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "1"]


class TestTracesExporterVariable:
    """OTEL_TRACES_EXPORTER: console prints, none disables, anything else is warned about."""

    def test_console(self) -> None:
        """`console` prints the call and stage spans to stdout."""
        done = run_child(
            f"""
            from tests.telemetry.conftest import make_call
            import telemetry
            handle = telemetry.configure(trail=False, masking_key={KEY!r}, metrics=False)
            handle.observer.call_ended(*make_call())
            handle.shutdown()
            """,
            env={"OTEL_TRACES_EXPORTER": "console"},
        )
        assert done.returncode == 0, done.stderr
        assert '"name": "execute_tool pay"' in done.stdout
        assert done.stdout.count('"name": "guard.') == 9

    def test_none_wins_over_an_endpoint(self) -> None:
        """`none` turns export off even with an endpoint set."""
        done = run_child(
            f"""
            import telemetry
            handle = telemetry.configure(trail=False, masking_key={KEY!r}, metrics=False)
            print(handle.tracer_provider is None, len(handle.observer.sinks))
            """,
            env={
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            },
        )
        assert done.stdout.split() == ["True", "0"], done.stderr

    def test_unknown_is_warned(
        self, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """`zipkin` is not something callgate exports to: it says so and carries on."""
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
        with caplog.at_level(logging.WARNING, logger="telemetry.setup"):
            handle = configure(trail=False, masking_key=KEY, metrics=False)
        handle.shutdown()
        assert any("zipkin" in record.getMessage() for record in caplog.records)


class TestNoLitter:
    """Used as a library, configure writes no files unless a trail is asked for."""

    def test_no_trail_directory_by_default(self, tmp_path: Path) -> None:
        """configure() with no trail settings creates nothing in the working directory."""
        done = run_child(
            f"""
            from tests.telemetry.conftest import make_call
            import telemetry
            handle = telemetry.configure(masking_key={KEY!r}, metrics=False)
            handle.observer.call_ended(*make_call())
            handle.shutdown()
            print(handle.trail is None)
            """,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True"]
        assert list(tmp_path.iterdir()) == []

    def test_asked_by_environment_or_argument(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """CALLGATE_TRAIL_DIR or trail_dir= turns the trail on."""
        monkeypatch.setenv("CALLGATE_TRAIL_DIR", str(tmp_path / "env"))
        handle = configure(masking_key=KEY, metrics=False)
        handle.observer.call_ended(*make_call())
        handle.shutdown()
        assert handle.trail_files and handle.trail_files[0].parent == tmp_path / "env"
        monkeypatch.delenv("CALLGATE_TRAIL_DIR")
        handle = configure(trail_dir=tmp_path / "arg", masking_key=KEY, metrics=False)
        handle.shutdown()
        assert handle.trail is not None

    def test_missing_key_warning_points_to_the_readme(
        self, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without a masking key the warning says what is lost and where to read about it."""
        monkeypatch.delenv("CALLGATE_MASKING_KEY", raising=False)
        with caplog.at_level(logging.WARNING, logger="telemetry.setup"):
            configure(trail=False, metrics=False).shutdown()
        message = " ".join(record.getMessage() for record in caplog.records)
        assert "CALLGATE_MASKING_KEY" in message and "README" in message
        readme = (ROOT / "README.md").read_text()
        assert "### The masking key" in readme
