"""Tamper evidence for span files: every line is chained to the one before it by a (keyed) hash.

A line is one OTLP JSON ``ExportTraceServiceRequest``. ``Chain.link`` appends to its
``resourceSpans`` one more resource, without spans, whose only attribute is ``callgate.chain``::

    v1:<k|h>:<chain id>:<line number>:<previous MAC>:<MAC>

The MAC is HMAC-SHA256 (``k``) under a key derived from the deployment's masking key, or SHA-256
(``h``) when there is none, over ``v1:<k|h>:<chain id>:<line number>:<previous MAC>`` and the
exact bytes of the line without the chain resource. Line numbers start at 1 and go on across the
files of one writer; the first line's previous MAC is 64 zeros. The files stay valid OTLP JSON: the
Collector and ``callgate load`` see a resource with no spans.

``verify`` reads back the files ``callgate load`` would read (``telemetry.discovery``) and reports
the first line of each chain that is broken (edited, or no MAC), unkeyed while a key is given,
mixed (a chain that changes mode), missing (a gap in the numbers or the links) or out of order;
files without a chain; lines without a link; torn last lines. A ``Chain`` has one mode for its
life: keyed when it was made with a key, plain SHA-256 otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from telemetry import attributes as attr
from telemetry.discovery import discover_files

__all__ = [
    "Chain",
    "ChainReport",
    "Problem",
    "chain_key",
    "env_chain_key",
    "verify",
]

VERSION = "v1"
_ZERO = "0" * 64
_HEAD = b'{"resource":{"attributes":[{"key":"' + attr.CHAIN.encode() + b'","value":{"stringValue":"'
_TAIL = b'"}}]}}]}'
_VALUE = re.compile(rb"^v1:([kh]):([0-9a-f]{16}):([0-9]{1,19}):([0-9a-f]{64}):([0-9a-f]{64})$")


def env_chain_key(name: str = "CALLGATE_MASKING_KEY") -> bytes | None:
    """The chain key from the masking key in the environment, or None when it is not set."""
    secret = os.environ.get(name, "")
    return chain_key(secret.encode()) if secret else None


def chain_key(masking_key: bytes) -> bytes:
    """The chain's key, derived from the masking key (one secret to manage, two uses kept apart)."""
    return hmac.digest(masking_key, b"callgate trail chain v1", "sha256")


def _mac(key: bytes | None, header: bytes, payload: bytes | memoryview) -> str:
    digest = hashlib.sha256() if key is None else hmac.new(key, digestmod="sha256")
    digest.update(header + b"\n")
    digest.update(payload)  # no copy of the line
    return digest.hexdigest()


class Chain:
    """The state of one writer's chain: its id, the last line number and MAC. Not thread-safe."""

    def __init__(self, key: bytes | None, *, chain_id: str | None = None) -> None:
        # The key, and so the mode, is fixed here: verify refuses a chain that changes mode.
        self._key = key
        self._mode = "k" if key is not None else "h"
        self.id = chain_id or os.urandom(8).hex()
        self.seq = 0
        self.prev = _ZERO

    @property
    def keyed(self) -> bool:
        """Whether this chain's MACs are keyed (``k``); set once, when the chain is made."""
        return self._mode == "k"

    def mark(self) -> tuple[int, str]:
        """The state now, to go back to when lines were linked but not written."""
        return self.seq, self.prev

    def reset(self, mark: tuple[int, str]) -> None:
        """Forget the lines linked since ``mark``."""
        self.seq, self.prev = mark

    def link(self, line: bytes) -> bytes:
        """``line`` (an OTLP JSON request, no newline) with its chain resource appended."""
        return b"".join(self.link_parts(line))

    def link_parts(self, line: bytes) -> tuple[memoryview, bytes]:
        """``link`` as two pieces to join (or write) without copying the line."""
        if not (line.startswith(b'{"resourceSpans":[') and line.endswith(b"]}")):
            raise ValueError("not an OTLP JSON line that ends its resourceSpans: cannot chain it")
        self.seq += 1
        header = f"{VERSION}:{self._mode}:{self.id}:{self.seq}:{self.prev}".encode()
        mac = _mac(self._key, header, line)
        self.prev = mac
        separator = b"" if line.endswith(b"[]}") else b","
        return memoryview(line)[:-2], separator + _HEAD + header + b":" + mac.encode() + _TAIL


@dataclass(frozen=True, slots=True)
class Problem:
    """The first thing wrong with a chain (or a file)."""

    path: Path
    line: int
    """1-based line number in ``path`` (0: the file as a whole)."""
    reason: str

    def __str__(self) -> str:
        # A file name is the one thing here an attacker chooses: a newline in it could print a
        # line of its own (``verify: OK``), so control and bidi characters are shown escaped.
        return _UNSAFE.sub(_escape, f"{self.path}:{self.line}: {self.reason}")


_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


@dataclass(slots=True)
class ChainReport:
    """What ``verify`` found."""

    files: int = 0
    """Files read (every file ``callgate load`` would read from the same paths)."""
    lines: int = 0
    """Lines read."""
    chains: dict[str, int] = field(default_factory=dict)
    """Chain id -> the last line number seen in order."""
    keyed: int = 0
    """Lines whose MAC was checked with the key."""
    unkeyed: int = 0
    """Lines with a plain SHA-256 chain (checked; shows damage, not a deliberate edit)."""
    unchecked: int = 0
    """Keyed lines whose MAC could not be checked (no key given): links and order only."""
    problems: list[Problem] = field(default_factory=list)
    """Sorted by file name, then line."""

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def verify(
    paths: Iterable[str | os.PathLike[str]],
    *,
    key: bytes | None = None,
    allow_unkeyed: bool = False,
) -> ChainReport:
    """Check the chains of the span files behind ``paths`` (the files ``callgate load`` reads).

    ``key`` is the chain key (``chain_key(masking key)``). With it, every line must carry a MAC
    made with that key: an unkeyed (SHA-256) line is a problem unless ``allow_unkeyed``. Without
    it keyed MACs are not checked, only the numbering and the links. A chain that holds keyed lines
    may hold no unkeyed one (key or no key: the first is named, ``mixed``); a file without a
    chained line is a problem. Reports the first problem of each chain, in the chain's own order
    (files are put in order by the line numbers they hold, so a copy that changed their
    modification times still verifies), and each file's first line without a link and torn last
    line.
    """
    report = ChainReport()
    segments: list[_Segment] = []
    for path in discover_files(paths):
        report.files += 1
        segments.extend(_FileCheck(path, key, allow_unkeyed, report).run())
    _stitch(segments, report)
    report.problems.sort(key=lambda p: (str(p.path), p.line))  # a writer's files sort in its order
    return report


def _lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(1-based number, the line without its newline, torn: it had no newline) for each line.

    A file is gzip when it starts like one, whatever its name, as the loader decides.
    """
    with path.open("rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        stream: Iterable[bytes] = raw
        if compressed:
            stream = gzip.GzipFile(fileobj=raw, mode="rb")
        for number, line in enumerate(stream, start=1):
            yield number, line.removesuffix(b"\n"), not line.endswith(b"\n")


def _split(line: bytes) -> tuple[bytes, bytes] | None:
    """(the line as it was before linking, the chain value), or None when it carries no link."""
    if not line.endswith(_TAIL):
        return None
    start = line.rfind(_HEAD)
    if start < 0:
        return None
    value = line[start + len(_HEAD) : -len(_TAIL)]
    body = line[:start]
    if body.endswith(b","):
        body = body[:-1]
    elif not body.endswith(b"["):
        return None
    return body + b"]}", value


@dataclass(slots=True)
class _Link:
    """One line's chain value, and what is wrong with the line on its own (None: nothing)."""

    mode: str
    chain_id: str
    seq: int
    prev: str
    mac: str
    problem: str | None


@dataclass(slots=True)
class _Segment:
    """Consecutive lines of one chain in one file, checked against each other as they were read."""

    path: Path
    first: _Link
    first_line: int
    last_seq: int
    last_mac: str
    problem: Problem | None = None
    """The segment's first problem: nothing after it in the segment counts."""
    keyed: bool = False
    """Some line of the segment is keyed."""
    first_unkeyed: int | None = None
    """The file line of its first unkeyed link: a problem if the chain holds keyed lines."""


class _FileCheck:
    """Reads one file: each line's link checked alone, then against the line before it."""

    def __init__(
        self, path: Path, key: bytes | None, allow_unkeyed: bool, report: ChainReport
    ) -> None:
        self._path = path
        self._key = key
        self._allow_unkeyed = allow_unkeyed
        self._report = report
        self._segments: list[_Segment] = []
        self._open: dict[str, _Segment] = {}

    def run(self) -> list[_Segment]:
        """The file's segments; file-level problems go straight to the report."""
        linked = unlinked = number = first_unlinked = 0
        torn = False
        try:
            for number, line, torn in _lines(self._path):
                self._report.lines += 1
                if torn:
                    self._problem(number, "torn last line (no newline)")
                    break
                link = self._link(line)
                if link is None:
                    unlinked += 1
                    first_unlinked = first_unlinked or number
                    continue
                linked += 1
                self._add(number, link)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as error:
            self._problem(number, f"cannot read past line {number}: {error}")
        if not linked and unlinked:
            self._problem(first_unlinked, f"no chain: none of its {unlinked} lines has a link")
        elif not linked and not torn:
            self._problem(0, "no chain: the file is empty")
        elif unlinked:
            more = f" ({unlinked - 1} more lines in this file)" if unlinked > 1 else ""
            self._problem(first_unlinked, f"broken: the line carries no chain link{more}")
        return self._segments

    def _problem(self, line: int, reason: str) -> None:
        self._report.problems.append(Problem(self._path, line, reason))

    def _link(self, line: bytes) -> _Link | None:
        parts = _split(line)
        match = _VALUE.match(parts[1]) if parts is not None else None
        if parts is None or match is None:
            return None
        mode, chain_id, seq_text, prev, mac = (group.decode() for group in match.groups())
        seq = int(seq_text)
        header = f"{VERSION}:{mode}:{chain_id}:{seq}:{prev}".encode()
        problem = None
        if mode == "h":
            self._report.unkeyed += 1
            good = hmac.compare_digest(_mac(None, header, parts[0]), mac)
            if good and self._key is not None and not self._allow_unkeyed:
                problem = (
                    f"unkeyed: line {seq} of chain {chain_id} carries no MAC made with the key"
                )
        elif self._key is not None:
            self._report.keyed += 1
            good = hmac.compare_digest(_mac(self._key, header, parts[0]), mac)
        else:
            self._report.unchecked += 1
            good = True
        if not good:
            problem = f"broken: line {seq} of chain {chain_id} was edited"
        return _Link(mode, chain_id, seq, prev, mac, problem)

    def _add(self, number: int, link: _Link) -> None:
        segment = self._open.get(link.chain_id)
        if segment is not None and self._segments[-1] is segment:
            self._extend(segment, number, link)
        else:
            segment = _Segment(
                path=self._path,
                first=link,
                first_line=number,
                last_seq=link.seq,
                last_mac=link.mac,
            )
            self._segments.append(segment)
            self._open[link.chain_id] = segment
            if link.problem is not None:
                segment.problem = Problem(self._path, number, link.problem)
        # Whether a mode switch is a problem depends on the whole chain: noted, judged later.
        segment.keyed |= link.mode == "k"
        if link.mode == "h" and segment.first_unkeyed is None:
            segment.first_unkeyed = number

    def _extend(self, segment: _Segment, number: int, link: _Link) -> None:
        """Check ``link`` follows the segment's last line."""
        if segment.problem is not None:
            return
        reason = link.problem or _follows(segment.last_seq, segment.last_mac, link)
        if reason is not None:
            segment.problem = Problem(self._path, number, reason)
            return
        segment.last_seq, segment.last_mac = link.seq, link.mac


def _follows(seq: int | None, prev: str, link: _Link) -> str | None:
    """Why ``link`` cannot come next in a chain whose last line is ``seq`` (None: the chain has
    no line yet) with MAC ``prev``; None when it can."""
    chain = link.chain_id
    expected = 1 if seq is None else seq + 1
    if link.seq > expected:
        return f"missing: chain {chain} skips lines {expected}-{link.seq - 1}"
    if link.seq < expected:
        return f"reordered: line {link.seq} of chain {chain} comes after line {expected - 1}"
    if seq is not None and link.prev != prev:
        return f"missing: line {link.seq} of chain {chain} does not follow line {seq}"
    if seq is None and link.prev != _ZERO:
        return f"missing: chain {chain} starts at a line that follows another"
    return None


def _stitch(segments: list[_Segment], report: ChainReport) -> None:
    """Put each chain's segments in the order of their line numbers and check each follows the
    last; report each chain's first problem."""
    by_chain: dict[str, list[_Segment]] = {}
    for segment in segments:
        by_chain.setdefault(segment.first.chain_id, []).append(segment)
    for chain_id, parts in by_chain.items():
        parts.sort(key=lambda s: s.first.seq)  # stable: ties stay in the order read
        keyed = any(s.keyed for s in parts)
        seq: int | None = None
        prev = _ZERO
        broken = False
        for segment in parts:
            if broken:
                # The chain's order is lost past its first problem, but a line that is bad in
                # itself (edited, unkeyed among keyed lines) is bad wherever it sits: a later
                # segment may stand earlier in the files (a forged line put before a file's own).
                own = _own_problem(segment, keyed)
                if own is not None:
                    report.problems.append(own)
                continue
            problem = _first_problem(segment, keyed, seq, prev)
            if problem is not None:
                report.problems.append(problem)
                broken = True
                continue
            seq, prev = segment.last_seq, segment.last_mac
            report.chains[chain_id] = seq


def _own_problem(segment: _Segment, keyed_chain: bool) -> Problem | None:
    """The segment's first problem that needs no line outside it: an edited or unlinked line, a
    gap inside it, or an unkeyed line in a chain that holds keyed ones."""
    found = [segment.problem] if segment.problem is not None else []
    if keyed_chain and segment.first_unkeyed is not None:
        # A keyed line cannot be made without the key; an unkeyed one can be made by anyone.
        # So in a chain that holds both, the first unkeyed line is the first bad one.
        mixed = f"mixed: chain {segment.first.chain_id} holds keyed lines and this one is unkeyed"
        found.append(Problem(segment.path, segment.first_unkeyed, mixed))
    return min(found, key=lambda p: p.line) if found else None  # stable: the segment's first


def _first_problem(
    segment: _Segment, keyed_chain: bool, seq: int | None, prev: str
) -> Problem | None:
    """The segment's first problem, given the chain's last line before it (``seq``, ``prev``)."""
    early = _own_problem(segment, keyed_chain)
    if early is not None and early.line == segment.first_line:
        return early
    gap = _follows(seq, prev, segment.first)
    return Problem(segment.path, segment.first_line, gap) if gap is not None else early
