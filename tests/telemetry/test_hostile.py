"""Hostile input never costs the trail: unencodable text, a full disk, a call that cannot be built."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analytics.load import connect, load
from guard.codes import Code
from telemetry import Masker, SpanFileWriter, TrailSink, attributes, configure
from telemetry.chain import chain_key, verify

from .conftest import KEY, make_call, read_spans

ROOT = Path(__file__).resolve().parents[2]
SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
# text with at least one lone surrogate somewhere
BAD_TEXT = st.builds(
    lambda head, bad, tail: head + bad + tail,
    st.text(max_size=20),
    SURROGATES,
    st.text(max_size=20),
)


def sink_for(directory: Path, **options: Any) -> tuple[SpanFileWriter, TrailSink]:
    writer = SpanFileWriter(directory, chain_key=chain_key(KEY))
    return writer, TrailSink(writer, Masker(key=KEY), resource={"service.name": "svc"}, **options)


class TestUnencodableText:
    """A lone surrogate anywhere in a call costs nothing: the text is replaced and flagged."""

    @settings(
        max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        where=st.sampled_from(["tool", "argument", "key", "call_id", "session", "raw", "message"]),
        bad=BAD_TEXT,
    )
    @example(where="raw", bad="\ud800\\")  # a lone surrogate next to an escape in invalid JSON
    def test_a_bad_call_costs_no_other_call(
        self, tmp_path_factory: pytest.TempPathFactory, where: str, bad: str
    ) -> None:
        """In one batch with good calls from other sessions, every call's spans are written."""
        directory = tmp_path_factory.mktemp("bad")
        writer, sink = sink_for(directory, batch_size=64)
        good = [make_call() for _ in range(3)]
        fields: dict[str, Any] = {}
        if where == "tool":
            hostile = make_call(
                tool=bad, spec=None, code=Code.UNKNOWN_TOOL, stages=("budget", "resolve")
            )
        elif where == "argument":
            hostile = make_call(arguments={"order_id": bad, "card_number": "x"})
        elif where == "key":
            hostile = make_call(arguments={bad: 1, "card_number": "x"})
        elif where == "raw":
            hostile = make_call(raw='{"order_id": "' + bad + '"', code=Code.INVALID_JSON,
                                stages=("budget", "resolve", "parse"))  # fmt: skip
        else:
            fields = {"call_id": bad} if where == "call_id" else {"session_id": bad}
            hostile = make_call(**fields)
            if where == "message":
                hostile[1].message = bad
        for call, result in [good[0], hostile, *good[1:]]:
            sink.submit(call, result)
        sink.shutdown()
        assert sink.errors == 0 and sink.lost_spans == 0 and sink.dropped == 0
        spans = read_spans(directory)
        calls = [s for s in spans if s["name"].startswith("execute_tool ")]
        assert len(calls) == 4
        flagged = [s for s in calls if s["attrs"].get(attributes.TEXT_REPLACED)]
        writer.files[0].read_bytes().decode("utf-8")  # strict UTF-8: raises on a surrogate
        assert len(flagged) == 1
        assert verify([directory], key=chain_key(KEY)).ok

    def test_flagged_on_the_span(self, trail_dir: Path) -> None:
        """The call that carried the bad text says so; its tool name shows U+FFFD."""
        _, sink = sink_for(trail_dir)
        sink.submit(*make_call(tool="get\ud800order", spec=None, code=Code.UNKNOWN_TOOL,
                               stages=("budget", "resolve")))  # fmt: skip
        sink.shutdown()
        (call,) = [s for s in read_spans(trail_dir) if s["name"].startswith("execute_tool ")]
        assert call["name"] == "execute_tool get\ufffdorder"
        assert call["attrs"][attributes.GEN_AI_TOOL_NAME] == "get\ufffdorder"
        assert call["attrs"][attributes.TEXT_REPLACED] is True

    def test_sdk_path_exports_too(self) -> None:
        """Through an OpenTelemetry TracerProvider the bad call's spans export like any other."""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        exported = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exported))
        handle = configure(trail=False, tracer_provider=provider, masking_key=KEY, metrics=False)
        handle.observer.call_ended(*make_call(call_id="call_\udfff"))
        handle.shutdown()
        (call,) = [s for s in exported.get_finished_spans() if s.name.startswith("execute_tool")]
        assert call.attributes is not None
        assert call.attributes[attributes.GEN_AI_TOOL_CALL_ID] == "call_\ufffd"
        assert call.attributes[attributes.TEXT_REPLACED] is True

    def test_writer_replaces_what_reaches_it_raw(self, trail_dir: Path) -> None:
        """Text handed to the writer directly (the sidecar's path) is made encodable and counted."""
        writer = SpanFileWriter(trail_dir)
        line = '{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"stringValue":"a\ud800"}}]}}]}'
        writer.write_lines([line, '{"resourceSpans":[]}'])
        writer.close()
        assert writer.replaced_lines == 1 and writer.lines == 2
        first = writer.files[0].read_bytes().decode("utf-8").splitlines()[0]
        assert json.loads(first)["resourceSpans"][0]["resource"]["attributes"][0]["value"] == {
            "stringValue": "a\ufffd"
        }


class TestCallThatCannotBeBuilt:
    """A call whose spans cannot be built is counted as lost; the others are written."""

    def test_counted(self, trail_dir: Path) -> None:
        """errors and lost_spans count it; the good calls' spans are on disk."""
        _, sink = sink_for(trail_dir, batch_size=64)
        broken, result = make_call()
        broken.marks = [0]  # one mark, and a chain that claims a stage: cannot be built
        broken.chain = ("budget", "resolve")
        broken.principal = None  # type: ignore[assignment]
        sink.submit(*make_call())
        sink.submit(broken, result)
        sink.submit(*make_call())
        sink.shutdown()
        assert sink.errors == 1
        assert sink.lost_spans == 1
        assert sink.spans == 20
        assert len(read_spans(trail_dir)) == 20


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "256k") -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def can_mount() -> bool:
    return shutil.which("mount") is not None and shutil.which("umount") is not None


class TestDiskFull:
    """A write that fails is counted, cut back to whole lines, and the trail goes on."""

    def test_real_full_filesystem(self, tmp_path: Path) -> None:
        """On a full tmpfs: lost lines counted, no torn line, writing resumes once there is room.

        Needs root to mount the tmpfs (the suite runs as root here); without it this test runs the
        same scenario under RLIMIT_FSIZE, which makes the kernel fail the write the same way.
        """
        if not (os.geteuid() == 0 and can_mount()):
            self.test_file_size_limit(tmp_path)
            return
        with small_tmpfs(tmp_path / "small") as mount:
            trail = mount / "trail"
            writer, sink = sink_for(trail, batch_size=1)
            filler = mount / "filler"
            free = os.statvfs(mount)
            filler.write_bytes(b"x" * (free.f_bavail * free.f_frsize - 12_000))
            for _ in range(6):
                sink.submit(*make_call())
                sink.force_flush(5)
            assert writer.write_errors >= 1
            lost = writer.lost_lines
            assert sink.lost_spans == lost * 10
            assert writer.lines + lost == 6
            assert trail.joinpath(writer.files[-1].name).read_bytes().endswith(b"\n")
            filler.unlink()  # space returns
            for _ in range(3):
                sink.submit(*make_call())
            sink.shutdown()
            assert writer.lines + lost == 9
            assert len(read_spans(trail)) == writer.lines * 10
            assert verify([trail], key=chain_key(KEY)).ok
            con = connect(tmp_path / "db.duckdb")
            assert load(con, [trail]).spans == writer.lines * 10
            assert con.execute("SELECT count(*) FROM load_errors").fetchone() == (0,)
            con.close()

    def test_file_size_limit(self, tmp_path: Path) -> None:
        """Under RLIMIT_FSIZE (a real kernel write failure, EFBIG) the same holds, in a child process."""
        script = textwrap.dedent(
            f"""
            import json, resource, signal, sys
            sys.path.insert(0, {str(ROOT)!r})
            from pathlib import Path
            from tests.telemetry.conftest import KEY, make_call, read_spans
            from telemetry import Masker, SpanFileWriter, TrailSink
            from telemetry.chain import chain_key, verify
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            trail = Path({str(tmp_path / "trail")!r})
            writer = SpanFileWriter(trail, chain_key=chain_key(KEY))
            sink = TrailSink(writer, Masker(key=KEY), resource={{}}, batch_size=1)
            sink.submit(*make_call()); sink.force_flush(5)
            size = writer.files[0].stat().st_size
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (2 * size + size // 2, hard))
            for _ in range(4):
                sink.submit(*make_call()); sink.force_flush(5)
            lost, errors = writer.lost_lines, writer.write_errors
            torn = not writer.files[-1].read_bytes().endswith(b"\\n")
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            for _ in range(2):
                sink.submit(*make_call())
            sink.shutdown()
            print(json.dumps(dict(lost=lost, errors=errors, torn=torn, lines=writer.lines,
                                  lost_spans=sink.lost_spans, spans=len(read_spans(trail)),
                                  verified=verify([trail], key=chain_key(KEY)).ok)))
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout.strip().splitlines()[-1])
        assert outcome["errors"] == 3 and outcome["lost"] == 3  # 1 line fitted, 3 did not
        assert outcome["torn"] is False
        assert outcome["lost_spans"] == 30
        assert outcome["lines"] == 4 and outcome["spans"] == 40
        assert outcome["verified"] is True
