"""A forger without the key cannot make `callgate verify` answer OK, and verify names the first
bad line: forged, spliced, re-chained, mode-switched, in any file `callgate load` would read."""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from callgate.cli import main
from telemetry import SpanFileWriter
from telemetry.chain import Chain, chain_key, verify

from .conftest import KEY

CHAIN_KEY = chain_key(KEY)
ATTACKER_KEY = chain_key(b"not the deployment's key")
_LINK = re.compile(rb',\{"resource":\{"attributes":\[\{"key":"callgate\.chain","value":'
                   rb'\{"stringValue":"v1:([kh]):([0-9a-f]{16}):([0-9]+):([0-9a-f]{64}):'
                   rb'([0-9a-f]{64})"\}\}\]\}\}\]\}$')  # fmt: skip


def payload(index: int) -> bytes:
    """An OTLP JSON request with one resource and no spans, different for each index."""
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": f"svc-{index}"}}]}
    request = {"resourceSpans": [{"resource": resource, "scopeSpans": []}]}
    return json.dumps(request, separators=(",", ":")).encode()


def genuine(
    directory: Path,
    lines: int,
    *,
    key: bytes | None = CHAIN_KEY,
    max_bytes: int = 1 << 20,
    prefix: str = "spans",
) -> SpanFileWriter:
    """``lines`` lines through the real writer (one write each, so rotation can split them).

    Two writers in one directory get different prefixes: in the same second and process they
    would otherwise share a file name."""
    writer = SpanFileWriter(directory, chain_key=key, max_bytes=max_bytes, prefix=prefix)
    for index in range(lines):
        writer.write_lines([payload(index)])
    writer.close()
    return writer


@dataclass(frozen=True)
class Link:
    """The chain value a line carries, and the line without it."""

    mode: str
    chain_id: str
    seq: int
    mac: str
    body: bytes


def parse(line: bytes) -> Link | None:
    """The line's link, or None for a line without one."""
    match = _LINK.search(line.rstrip(b"\n"))
    if match is None:
        return None
    body = line[: match.start()] + b"]}"
    mode, chain_id, seq, _prev, mac = (group.decode() for group in match.groups())
    return Link(mode, chain_id, int(seq), mac, body)


def _chain(key: bytes | None, chain_id: str, after: bytes | None) -> Chain:
    """A forger's chain going on from the line ``after`` (None: from the start)."""
    chain = Chain(key, chain_id=chain_id)
    before = parse(after) if after is not None else None
    if before is not None:
        chain.seq, chain.prev = before.seq, before.mac
    return chain


def rechain(
    lines: list[bytes], after: bytes | None, key: bytes | None, chain_id: str
) -> list[bytes]:
    """``lines`` re-linked as the forger would: same chain id, numbering going on from ``after``
    (the line before them, None at the start), MACs made with ``key`` (None: plain SHA-256).
    Lines without a link are left as they are."""
    chain = _chain(key, chain_id, after)
    out = []
    for line in lines:
        link = parse(line)
        out.append(line if link is None else chain.link(link.body) + b"\n")
    return out


def forged_line(after: bytes | None, key: bytes | None, index: int, chain_id: str) -> bytes:
    """A new line that continues the chain after ``after``, made with ``key``."""
    return _chain(key, chain_id, after).link(payload(10_000 + index)) + b"\n"


# The forger's moves on one file's lines; ``before`` is the last line of the files before it.
_MOVES = ("delete", "duplicate", "swap", "move", "unkeyed_line", "attacker_line",
          "unkeyed_rest", "attacker_rest", "unchained_line", "append_unkeyed", "torn")  # fmt: skip


def apply(
    move: str, lines: list[bytes], before: bytes | None, at: int, to: int, chain_id: str
) -> list[bytes]:
    """``lines`` after one move at index ``at`` (and ``to`` where a second index is needed)."""
    out = list(lines)
    at, to = at % len(out), to % len(out)
    previous = out[at - 1] if at else before
    if move == "delete" and len(out) > 1:
        del out[at]
    elif move == "duplicate":
        out.insert(to, out[at])
    elif move == "swap":
        out[at], out[to] = out[to], out[at]
    elif move == "move":
        out.insert(to, out.pop(at))
    elif move in ("unkeyed_line", "attacker_line"):
        key = None if move == "unkeyed_line" else ATTACKER_KEY
        out[at] = rechain([out[at]], previous, key, chain_id)[0]
    elif move in ("unkeyed_rest", "attacker_rest"):
        key = None if move == "unkeyed_rest" else ATTACKER_KEY
        out[at:] = rechain(out[at:], previous, key, chain_id)
    elif move == "unchained_line":
        out.insert(at, payload(20_000 + at) + b"\n")
    elif move == "append_unkeyed":
        out.append(forged_line(out[-1], None, at, chain_id))
    elif move == "torn":
        out[-1] = out[-1][: max(1, len(out[-1]) // 2)]
    return out


def first_difference(old: list[bytes], new: list[bytes]) -> int | None:
    """The index of the first line that differs; None when ``new`` is ``old`` or a prefix of it."""
    for index, line in enumerate(new):
        if index >= len(old) or line != old[index]:
            return index
    return None


def locate(files: list[list[bytes]], index: int) -> tuple[int, int]:
    """(file index, 1-based line) of the ``index``-th line of the files read one after another."""
    for number, lines in enumerate(files):
        if index < len(lines):
            return number, index + 1
        index -= len(lines)
    raise AssertionError("past the end")


_ATTACK = {
    "lines": st.integers(2, 9),
    "rotate": st.booleans(),
    "target": st.integers(0, 50),
}


def attacks(moves: tuple[str, ...]) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    return st.lists(
        st.tuples(st.sampled_from(moves), st.integers(0, 50), st.integers(0, 50)),
        min_size=1,
        max_size=3,
    )


def attack(
    directory: Path, lines: int, rotate: bool, target: int, moves: list[tuple[str, int, int]]
) -> tuple[list[Path], list[list[bytes]], list[list[bytes]]]:
    """A keyed trail, then ``moves`` applied to one of its files: (paths, before, after)."""
    writer = genuine(directory, lines, max_bytes=400 if rotate else 1 << 20)
    paths = writer.files
    old = [path.read_bytes().splitlines(keepends=True) for path in paths]
    new = [list(file) for file in old]
    which = target % len(paths)
    before = next((file[-1] for file in reversed(new[:which]) if file), None)
    # A torn line is the end of a file: tear last, once.
    moves = sorted(moves, key=lambda m: m[0] == "torn")
    moves = [m for i, m in enumerate(moves) if m[0] != "torn" or i == len(moves) - 1]
    for move, at, to in moves:
        new[which] = apply(move, new[which], before, at, to, writer.chain_id)
    for path, file in zip(paths, new, strict=True):
        path.write_bytes(b"".join(file))
    return paths, old, new


def assert_first_bad_line(
    paths: list[Path], old: list[list[bytes]], new: list[list[bytes]], key: bytes | None
) -> None:
    """verify names the first line that differs from what the writer wrote, nothing before it."""
    report = verify([paths[0].parent], key=key)
    index = first_difference([x for f in old for x in f], [x for f in new for x in f])
    if index is None:  # only the tail was cut: a shorter chain is a valid one
        assert report.ok, report.problems
        return
    file_index, line = locate(new, index)
    found = sorted((paths.index(p.path), p.line) for p in report.problems)
    assert found, f"no problem found; first change at {paths[file_index]}:{line}"
    assert found[0] == (file_index, line), report.problems


class TestFirstBadLine:
    """Whatever the forger does to a keyed trail, verify names the first line that differs from
    what the writer wrote, and nothing before it."""

    @settings(max_examples=150, deadline=None)
    @given(moves=attacks(_MOVES), **_ATTACK)
    # Two forged unkeyed lines put first in the first file: named there, not at the next file.
    @example(
        moves=[("append_unkeyed", 0, 0), ("append_unkeyed", 0, 0), ("swap", 0, 2)],
        lines=2,
        rotate=True,
        target=0,
    )
    def test_with_the_key(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        lines: int,
        rotate: bool,
        target: int,
        moves: list[tuple[str, int, int]],
    ) -> None:
        """Any mix of moves (edits, splices, re-chains, mode switches) on any file, with the key."""
        paths, old, new = attack(tmp_path_factory.mktemp("trail"), lines, rotate, target, moves)
        assert_first_bad_line(paths, old, new, CHAIN_KEY)

    @settings(max_examples=100, deadline=None)
    @given(moves=attacks(tuple(m for m in _MOVES if not m.startswith("attacker"))), **_ATTACK)
    def test_without_the_key(
        self,
        tmp_path_factory: pytest.TempPathFactory,
        lines: int,
        rotate: bool,
        target: int,
        moves: list[tuple[str, int, int]],
    ) -> None:
        """Without the key too, for all but keyed MACs: unkeyed lines among keyed ones are named."""
        paths, old, new = attack(tmp_path_factory.mktemp("trail"), lines, rotate, target, moves)
        links = [parse(line) for file in new for line in file]
        assume(any(link is not None and link.mode == "k" for link in links))
        assert_first_bad_line(paths, old, new, None)


class TestSplices:
    """Lines of another genuine chain (same key) copied into a file are named where they land."""

    @settings(max_examples=60, deadline=None)
    @given(
        lines=st.integers(1, 6),
        start=st.integers(0, 5),
        length=st.integers(1, 6),
        at=st.integers(0, 6),
    )
    def test_copied_run_of_another_chain(
        self, tmp_path_factory: pytest.TempPathFactory, lines: int, start: int, length: int, at: int
    ) -> None:
        """A run of B's lines copied into A's file: its first copied line is the one problem."""
        directory = tmp_path_factory.mktemp("splice")
        other = genuine(directory, 6, prefix="b").files[0]
        target = genuine(directory, lines, prefix="a").files[0]
        run = other.read_bytes().splitlines(keepends=True)[start % 6 :][:length]
        mine = target.read_bytes().splitlines(keepends=True)
        at %= len(mine) + 1
        target.write_bytes(b"".join([*mine[:at], *run, *mine[at:]]))
        os.utime(target, ns=(2 * 10**18, 2 * 10**18))  # read after B's own file, as load reads
        problems = verify([directory], key=CHAIN_KEY).problems
        assert [(p.path, p.line, p.reason.split(":")[0]) for p in problems] == [
            (target, at + 1, "reordered")
        ]


class TestWithTheKey:
    """With the key, only lines made with it pass; --allow-unkeyed alone accepts others."""

    def test_unkeyed_continuation(self, trail_dir: Path) -> None:
        """Unkeyed lines continuing a keyed chain are reported at the first of them."""
        writer = genuine(trail_dir, 3)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines) + forged_line(lines[-1], None, 0, writer.chain_id))
        problems = verify([trail_dir], key=CHAIN_KEY).problems
        assert [(p.line, p.reason.split(":")[0]) for p in problems] == [(4, "unkeyed")]

    def test_file_rewritten_unkeyed_with_the_same_chain_id(self, trail_dir: Path) -> None:
        """A whole file re-chained without the key, same id and numbering, fails at line 1."""
        writer = genuine(trail_dir, 4)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(rechain(lines, None, None, writer.chain_id)))
        problems = verify([trail_dir], key=CHAIN_KEY).problems
        assert [(p.path, p.line, p.reason.split(":")[0]) for p in problems] == [
            (path, 1, "unkeyed")
        ]
        assert verify([trail_dir]).ok  # without the key nothing tells it apart: why the key matters

    def test_whole_new_unkeyed_chain(self, trail_dir: Path) -> None:
        """A new file from an unkeyed writer is a problem with the key, accepted only on request."""
        genuine(trail_dir, 2)
        forged = genuine(trail_dir, 2, key=None, prefix="forged")
        report = verify([trail_dir], key=CHAIN_KEY)
        assert [(p.path, p.line) for p in report.problems] == [(forged.files[0], 1)]
        assert "carries no MAC made with the key" in report.problems[0].reason
        accepted = verify([trail_dir], key=CHAIN_KEY, allow_unkeyed=True)
        assert accepted.ok and accepted.keyed == 2 and accepted.unkeyed == 2

    def test_unkeyed_trail_without_key_still_verifies(self, trail_dir: Path) -> None:
        """A deployment without a key keeps its plain chain: checked, and OK without a key."""
        genuine(trail_dir, 3, key=None)
        report = verify([trail_dir])
        assert report.ok and report.unkeyed == 3


class TestModes:
    """A chain never changes mode: even without the key, a mix is a problem."""

    @pytest.mark.parametrize("key", [CHAIN_KEY, None], ids=["with key", "without key"])
    def test_unkeyed_line_inside_a_keyed_chain(self, trail_dir: Path, key: bytes | None) -> None:
        """An unkeyed line continuing keyed ones is reported at that line, key or no key."""
        writer = genuine(trail_dir, 3)
        path = writer.files[0]
        lines = path.read_bytes().splitlines(keepends=True)
        lines.insert(2, forged_line(lines[1], None, 0, writer.chain_id))
        path.write_bytes(b"".join(lines))
        problems = verify([trail_dir], key=key).problems
        assert [p.line for p in problems] == [3]
        assert problems[0].reason.startswith("unkeyed" if key else "mixed")

    def test_unkeyed_file_of_a_keyed_chain_without_the_key(self, trail_dir: Path) -> None:
        """One rotated file re-chained unkeyed is named, wherever it sorts, even without the key."""
        writer = genuine(trail_dir, 8, max_bytes=400)
        assert len(writer.files) >= 3
        for victim in (writer.files[0], writer.files[1]):
            saved = victim.read_bytes()
            lines = saved.splitlines(keepends=True)
            index = writer.files.index(victim)
            before = (
                writer.files[index - 1].read_bytes().splitlines(keepends=True)[-1]
                if index
                else None
            )
            victim.write_bytes(b"".join(rechain(lines, before, None, writer.chain_id)))
            problems = verify([trail_dir]).problems
            assert [(p.path, p.line, p.reason.split(":")[0]) for p in problems] == [
                (victim, 1, "mixed")
            ]
            victim.write_bytes(saved)

    def test_a_chain_keeps_its_mode(self) -> None:
        """The writer's chain is keyed exactly when it was made with a key."""
        assert Chain(CHAIN_KEY).keyed and not Chain(None).keyed


class TestFiles:
    """verify reads the files load reads; a file without a chain is a problem."""

    def test_ndjson_beside_the_trail_is_checked(self, trail_dir: Path) -> None:
        """A forged .ndjson (and .json, and gzip under any name) in the directory is read."""
        writer = genuine(trail_dir, 2)
        unkeyed = genuine(trail_dir / "other", 1, key=None).files[0]
        forged = trail_dir / "extra.ndjson"
        forged.write_bytes(unkeyed.read_bytes())
        (trail_dir / "plain.json").write_bytes(payload(1) + b"\n")
        (trail_dir / "notes.txt").write_text("not a span file\n")
        report = verify([trail_dir], key=CHAIN_KEY)
        assert report.files == 3
        assert sorted((p.path.name, p.line, p.reason.split(":")[0]) for p in report.problems) == [
            ("extra.ndjson", 1, "unkeyed"),
            ("plain.json", 1, "no chain"),
        ]
        assert writer.files[0] not in [p.path for p in report.problems]

    def test_gzip_by_content_not_by_name(self, trail_dir: Path) -> None:
        """A gzip file named .jsonl is read decompressed, as the loader reads it."""
        writer = genuine(trail_dir, 2)
        path = writer.files[0]
        path.write_bytes(gzip.compress(path.read_bytes()))
        assert verify([trail_dir], key=CHAIN_KEY).ok

    def test_empty_and_unchained_files(self, trail_dir: Path) -> None:
        """An empty file, and a file of valid OTLP lines without links, hold no chain."""
        genuine(trail_dir, 1)
        (trail_dir / "empty.jsonl").write_bytes(b"")
        (trail_dir / "bare.jsonl").write_bytes(payload(1) + b"\n" + payload(2) + b"\n")
        problems = sorted(verify([trail_dir], key=CHAIN_KEY).problems, key=lambda p: p.path.name)
        assert [(p.path.name, p.line, p.reason) for p in problems] == [
            ("bare.jsonl", 1, "no chain: none of its 2 lines has a link"),
            ("empty.jsonl", 0, "no chain: the file is empty"),
        ]

    def test_named_file_brings_its_rotated_siblings(self, tmp_path: Path) -> None:
        """verify FILE reads the rotated backups load reads with it (traces-*.json[.gz])."""
        writer = genuine(tmp_path / "w", 1, key=None)
        current = tmp_path / "traces.json"
        current.write_bytes(genuine(tmp_path / "k", 1).files[0].read_bytes())
        backup = tmp_path / "traces-2026-01-01T00-00-00.000.json.gz"
        backup.write_bytes(gzip.compress(writer.files[0].read_bytes()))
        report = verify([current], key=CHAIN_KEY)
        assert report.files == 2
        assert [(p.path, p.reason.split(":")[0]) for p in report.problems] == [(backup, "unkeyed")]

    def test_file_order_comes_from_the_chain(self, trail_dir: Path) -> None:
        """Rotated files whose times a copy reset still verify: line numbers give the order."""
        writer = genuine(trail_dir, 8, max_bytes=400)
        for age, path in enumerate(reversed(writer.files)):
            os.utime(path, ns=(age * 10**9, age * 10**9))
        report = verify([trail_dir], key=CHAIN_KEY)
        assert report.ok, report.problems
        assert report.chains == {writer.chain_id: 8}

    def test_a_file_copied_beside_itself(self, trail_dir: Path) -> None:
        """A rotated file replayed under another name repeats its lines: a problem."""
        writer = genuine(trail_dir, 8, max_bytes=400)
        copy = trail_dir / "copy.jsonl"
        copy.write_bytes(writer.files[1].read_bytes())
        problems = verify([trail_dir], key=CHAIN_KEY).problems
        assert [(p.path, p.line, p.reason.split(":")[0]) for p in problems] == [
            (copy, 1, "reordered")
        ]

    def test_problems_are_listed_in_reading_order(self, trail_dir: Path) -> None:
        """File-level and chain problems come out sorted by file name, then line."""
        writer = genuine(trail_dir, 8, max_bytes=400)
        last = writer.files[-1]
        last.write_bytes(last.read_bytes() + payload(1) + b"\n")
        first = writer.files[0].read_bytes().splitlines(keepends=True)
        writer.files[0].write_bytes(b"".join([first[0], first[0], *first[1:]]))
        problems = verify([trail_dir], key=CHAIN_KEY).problems
        assert [(p.path, p.line) for p in problems] == [(writer.files[0], 2), (last, 2)]

    def test_a_file_deleted_between_others(self, trail_dir: Path) -> None:
        """A rotated file taken out is a gap at the first line of the file after it."""
        writer = genuine(trail_dir, 8, max_bytes=400)
        writer.files[1].unlink()
        problems = verify([trail_dir], key=CHAIN_KEY).problems
        assert [(p.path, p.line, p.reason.split(":")[0]) for p in problems] == [
            (writer.files[2], 1, "missing")
        ]


class TestCommand:
    """`callgate verify` with a key refuses unkeyed lines unless --allow-unkeyed, and says why."""

    def test_unkeyed_lines_fail_then_are_accepted_on_request(
        self, trail_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Exit 1 naming the file and --allow-unkeyed; exit 0 with the flag, saying what holds."""
        genuine(trail_dir, 2)
        forged = genuine(trail_dir, 1, key=None, prefix="forged").files[0]
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())
        runner = CliRunner()
        refused = runner.invoke(main, ["verify", str(trail_dir)])
        assert refused.exit_code == 1
        assert f"{forged}:1: unkeyed" in refused.output
        assert "--allow-unkeyed" in refused.output
        accepted = runner.invoke(main, ["verify", "--allow-unkeyed", str(trail_dir)])
        assert accepted.exit_code == 0, accepted.output
        assert "the 2 keyed lines were written in order by a holder of the key" in accepted.output

    def test_ok_says_what_it_proves(self, trail_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """With the key: written in order by a holder of the key; without: damage only."""
        genuine(trail_dir, 2)
        runner = CliRunner()
        monkeypatch.delenv("CALLGATE_MASKING_KEY", raising=False)
        unchecked = runner.invoke(main, ["verify", str(trail_dir)])
        assert unchecked.exit_code == 0
        assert "shows damage, not a deliberate edit" in unchecked.output
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())
        keyed = runner.invoke(main, ["verify", str(trail_dir)])
        assert "every line was written, in this order, by a holder of the key" in keyed.output

    def test_hostile_file_names_print_on_one_line(
        self, trail_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A name with a newline, bidi override or bad bytes is escaped: no fake `verify: OK`."""
        genuine(trail_dir, 1)
        name = os.fsdecode(b"x\nverify: OK\xe2\x80\xae\xff.jsonl")
        (trail_dir / name).write_bytes(payload(1) + b"\n")
        monkeypatch.setenv("CALLGATE_MASKING_KEY", KEY.decode())
        result = CliRunner().invoke(main, ["verify", str(trail_dir)])
        assert result.exit_code == 1
        assert "\nverify: OK" not in result.output
        assert "x\\x0averify: OK\\u202e\\udcff.jsonl:1: no chain" in result.output
