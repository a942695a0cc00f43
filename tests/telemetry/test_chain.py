"""Tamper evidence: every trail line is chained; `callgate verify` finds the first bad line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.load import connect, load
from callgate.cli import main
from telemetry import Masker, SpanFileWriter, TrailSink, parse_request
from telemetry.chain import chain_key, verify

from .conftest import KEY, make_call

CHAIN_KEY = chain_key(KEY)


def write_trail(
    directory: Path, lines: int, *, key: bytes | None = CHAIN_KEY, **options: int
) -> SpanFileWriter:
    """``lines`` lines of one call each, through the real trail sink."""
    writer = SpanFileWriter(directory, chain_key=key, **options)
    sink = TrailSink(writer, Masker(key=KEY), resource={"service.name": "svc"}, batch_size=1)
    for _ in range(lines):
        sink.submit(*make_call())
        sink.force_flush(5)
    sink.shutdown()
    assert writer.lines == lines
    return writer


def all_lines(writer: SpanFileWriter) -> list[tuple[Path, list[bytes]]]:
    return [(path, path.read_bytes().splitlines(keepends=True)) for path in writer.files]


class TestIntact:
    """An untouched trail verifies, and stays OTLP the Collector and the loader accept."""

    def test_untouched_files_verify(self, trail_dir: Path) -> None:
        """Across rotation, every line is checked with the key and the chain is whole."""
        writer = write_trail(trail_dir, 12, max_bytes=8_000)
        assert len(writer.files) > 2
        report = verify([trail_dir], key=CHAIN_KEY)
        assert report.ok, report.problems
        assert report.keyed == 12
        assert report.chains == {writer.chain_id: 12}

    def test_lines_are_still_otlp(self, trail_dir: Path) -> None:
        """Each chained line parses as an ExportTraceServiceRequest; the chain is a span-less resource."""
        writer = write_trail(trail_dir, 2)
        for line in writer.files[0].read_text().splitlines():
            request = parse_request(line)
            chain = request.resource_spans[-1]
            assert [a.key for a in chain.resource.attributes] == ["callgate.chain"]
            assert not chain.scope_spans
            assert len(request.resource_spans[0].scope_spans[0].spans) == 10

    def test_loader_reads_chained_files(self, trail_dir: Path, tmp_path: Path) -> None:
        """`callgate load` loads every span of a chained file and no bad line."""
        write_trail(trail_dir, 3)
        con = connect(tmp_path / "db.duckdb")
        report = load(con, [trail_dir])
        assert report.spans == 30
        assert con.execute("SELECT count(*) FROM load_errors").fetchone() == (0,)
        con.close()

    def test_gzip_rotated_files_verify(self, trail_dir: Path) -> None:
        """A file compressed after rotation still verifies."""
        writer = write_trail(trail_dir, 3)
        path = writer.files[0]
        Path(str(path) + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
        assert verify([trail_dir], key=CHAIN_KEY).ok

    def test_unkeyed_chain_verifies_without_key(self, trail_dir: Path) -> None:
        """Without a key the chain is SHA-256: checked, and reported as unkeyed."""
        write_trail(trail_dir, 3, key=None)
        report = verify([trail_dir])
        assert report.ok and report.unkeyed == 3 and report.keyed == 0


class TestTampered:
    """Each kind of edit is reported at the first line it touches."""

    def test_edited_byte(self, trail_dir: Path) -> None:
        """Changing one character of a span is a broken line."""
        writer = write_trail(trail_dir, 4)
        path = writer.files[0]
        lines = path.read_text().splitlines(keepends=True)
        lines[2] = lines[2].replace('"get_order', '"get_ordeR', 1).replace("s-0042", "s-0043", 1)
        path.write_text("".join(lines))
        report = verify([path], key=CHAIN_KEY)
        assert [(p.line, p.reason.split(":")[0]) for p in report.problems] == [(3, "broken")]

    def test_recomputed_without_the_key(self, trail_dir: Path) -> None:
        """An editor without the key who recomputes the MAC with another key is caught."""
        writer = write_trail(trail_dir, 3)
        forged = trail_dir / "forged"
        other = write_trail(forged, 3, key=chain_key(b"attacker"))
        assert verify(other.files, key=chain_key(b"attacker")).ok
        report = verify(other.files, key=CHAIN_KEY)
        assert report.problems[0].line == 1 and "broken" in report.problems[0].reason
        assert verify(writer.files, key=CHAIN_KEY).ok

    def test_deleted_line(self, trail_dir: Path) -> None:
        """A line taken out is a gap: reported at the line after it."""
        writer = write_trail(trail_dir, 5)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[:2] + lines[3:]))
        report = verify([path], key=CHAIN_KEY)
        assert len(report.problems) == 1
        assert report.problems[0].line == 3
        assert report.problems[0].reason.startswith("missing: chain")
        assert "skips lines 3-3" in report.problems[0].reason

    def test_swapped_lines(self, trail_dir: Path) -> None:
        """Two lines swapped: the first out of place is reported."""
        writer = write_trail(trail_dir, 4)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        lines[1], lines[2] = lines[2], lines[1]
        path.write_bytes(b"".join(lines))
        report = verify([path], key=CHAIN_KEY)
        assert report.problems[0].line == 2
        assert report.problems[0].reason.startswith("missing")  # line 3 where 2 was due

    def test_duplicated_line(self, trail_dir: Path) -> None:
        """A line repeated (replayed) reads as out of order."""
        writer = write_trail(trail_dir, 3)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join([*lines[:2], lines[1], lines[2]]))
        report = verify([path], key=CHAIN_KEY)
        assert report.problems[0].line == 3
        assert report.problems[0].reason.startswith("reordered")

    def test_missing_first_file(self, trail_dir: Path) -> None:
        """A chain that starts past line 1 (a deleted file) is missing its start."""
        writer = write_trail(trail_dir, 12, max_bytes=8_000)
        writer.files[0].unlink()
        report = verify([trail_dir], key=CHAIN_KEY)
        assert report.problems[0].path == writer.files[1]
        assert "skips lines 1-" in report.problems[0].reason

    def test_inserted_unchained_line(self, trail_dir: Path) -> None:
        """A valid OTLP line without a link, inserted, is broken."""
        writer = write_trail(trail_dir, 2)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        extra = json.dumps({"resourceSpans": []}).encode() + b"\n"
        path.write_bytes(lines[0] + extra + lines[1])
        report = verify([path], key=CHAIN_KEY)
        assert [(p.line, p.reason.split(":")[0]) for p in report.problems] == [(2, "broken")]

    def test_torn_last_line(self, trail_dir: Path) -> None:
        """A last line without its newline is reported as torn."""
        writer = write_trail(trail_dir, 2)
        path = writer.files[0]
        data = path.read_bytes()
        path.write_bytes(data[: len(data) - 40])
        report = verify([path], key=CHAIN_KEY)
        assert [(p.line, p.reason) for p in report.problems] == [(2, "torn last line (no newline)")]

    @settings(max_examples=40, deadline=None)
    @given(data=st.data())
    def test_any_single_byte_edit_is_caught(
        self, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
    ) -> None:
        """Whatever byte of whatever line is changed, verify reports a problem."""
        directory = tmp_path_factory.mktemp("edit")
        writer = write_trail(directory, 2)
        path = writer.files[0]
        raw = bytearray(path.read_bytes())
        newlines = [index for index, byte in enumerate(raw) if byte == 10]
        position = data.draw(st.integers(0, len(raw) - 1).filter(lambda i: i not in newlines))
        replacement = data.draw(st.integers(32, 126).filter(lambda b: b != raw[position]))
        raw[position] = replacement
        path.write_bytes(bytes(raw))
        assert not verify([path], key=CHAIN_KEY).ok


class TestCommand:
    """`callgate verify` speaks to a person and exits non-zero on a problem."""

    def test_ok_and_problem(self, trail_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Exit 0 and OK on an intact trail; exit 1 naming file and line on an edited one."""
        writer = write_trail(trail_dir, 3)
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())
        runner = CliRunner()
        result = runner.invoke(main, ["verify", str(trail_dir)])
        assert result.exit_code == 0, result.output
        assert "verify: OK" in result.output
        assert "3 with the key" in result.output
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(lines[0] + lines[2])
        result = runner.invoke(main, ["verify", str(trail_dir)])
        assert result.exit_code == 1
        assert f"{path}:2: missing" in result.output

    def test_in_a_subprocess(self, trail_dir: Path) -> None:
        """The installed command works as typed (entry point, real process)."""
        write_trail(trail_dir, 1)
        done = subprocess.run(
            [str(Path(sys.executable).parent / "callgate"), "verify", str(trail_dir)],
            capture_output=True, text=True, check=False,
            env={"CALLGATE_MASKING_KEY": KEY.decode(), "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "verify: OK" in done.stdout


class TestSidecarFiles:
    """What the sidecar writes is chained too, keyed from the environment's masking key."""

    def test_sidecar_lines_verify(self, tmp_path: Path) -> None:
        """Spans exported over OTLP/gRPC to a real receiver land in chained files that verify."""
        from telemetry import OTLPReceiver, configure

        writer = SpanFileWriter(tmp_path / "sidecar", chain_key=CHAIN_KEY)
        receiver = OTLPReceiver(writer, grpc_port=0, http_port=None).start()
        try:
            handle = configure(
                trail=False, otlp=True, otlp_endpoint=f"http://127.0.0.1:{receiver.grpc_port}",
                otlp_protocol="grpc", otlp_timeout=5, metrics=False, masking_key=KEY,
            )  # fmt: skip
            for _ in range(3):
                handle.observer.call_ended(*make_call())
            assert handle.force_flush(10)
            handle.shutdown()
        finally:
            receiver.stop()
        report = verify([tmp_path / "sidecar"], key=CHAIN_KEY)
        assert report.ok, report.problems
        assert report.keyed == writer.lines >= 1
