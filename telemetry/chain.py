"""Tamper evidence for span files: every line is chained to the one before it by a (keyed) hash.

A line is one OTLP JSON ``ExportTraceServiceRequest``. ``Chain.link`` appends to its
``resourceSpans`` one more resource, without spans, whose only attribute is ``callgate.chain``::

    v1:<k|h>:<chain id>:<line number>:<previous MAC>:<MAC>

The MAC is HMAC-SHA256 (``k``) under a key derived from the deployment's masking key, or SHA-256
(``h``) when there is none, over ``v1:<k|h>:<chain id>:<line number>:<previous MAC>`` and the
exact bytes of the line without the chain resource. Line numbers start at 1 and go on across the
files of one writer; the first line's previous MAC is 64 zeros. The files stay valid OTLP JSON: the
Collector and ``callgate load`` see a resource with no spans.

``verify`` reads files back and reports the first line of each chain that is broken (edited, or no
MAC), missing (a gap in the numbers or the links) or out of order, and torn last lines.
"""

from __future__ import annotations

import gzip
import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from telemetry import attributes as attr

__all__ = [
    "Chain",
    "ChainReport",
    "Problem",
    "chain_key",
    "env_chain_key",
    "iter_files",
    "verify",
]

VERSION = "v1"
_ZERO = "0" * 64
_HEAD = b'{"resource":{"attributes":[{"key":"' + attr.CHAIN.encode() + b'","value":{"stringValue":"'
_TAIL = b'"}}]}}]}'
_VALUE = re.compile(
    rb"^v1:([kh]):([0-9a-f]{16}):([0-9]{1,19}):([0-9a-f]{64}):([0-9a-f]{64})$"
)


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
        self._key = key
        self._mode = "k" if key is not None else "h"
        self.id = chain_id or os.urandom(8).hex()
        self.seq = 0
        self.prev = _ZERO

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
    """1-based line number in ``path``."""
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(slots=True)
class ChainReport:
    """What ``verify`` found."""

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

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems


def iter_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """The span files named: files as given, directories' ``*.jsonl[.gz]`` sorted by name."""
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(
                p for p in path.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")) and p.is_file()
            )
        else:
            yield path


def _read_lines(path: Path) -> tuple[list[bytes], bool]:
    """The file's lines without newlines, and whether the last one was torn (no newline)."""
    if path.name.endswith(".gz"):
        with gzip.open(path, "rb") as handle:
            data = handle.read()
    else:
        data = path.read_bytes()
    torn = bool(data) and not data.endswith(b"\n")
    lines = data.split(b"\n")
    if not torn:
        lines.pop()  # after the last newline
    return lines, torn


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
class _State:
    seq: int
    prev: str
    where: Problem


def verify(
    paths: Iterable[str | os.PathLike[str]], *, key: bytes | None = None
) -> ChainReport:
    """Check the chains of the files in ``paths`` (read in the order given, directories by name).

    ``key`` is the chain key (``chain_key(masking key)``); without it keyed MACs are not checked,
    only the numbering and the links. Reports the first problem per chain and every torn last line.
    """
    report = ChainReport()
    states: dict[str, _State] = {}
    broken: set[str] = set()
    for path in iter_files(paths):
        try:
            lines, torn = _read_lines(path)
        except (OSError, EOFError, gzip.BadGzipFile) as error:
            report.problems.append(Problem(path, 0, f"cannot read: {error}"))
            continue
        for number, line in enumerate(lines, start=1):
            report.lines += 1
            if torn and number == len(lines):
                report.problems.append(Problem(path, number, "torn last line (no newline)"))
                break
            where = Problem(path, number, "")
            parts = _split(line)
            match = _VALUE.match(parts[1]) if parts is not None else None
            if parts is None or match is None:
                report.problems.append(_at(where, "broken: the line carries no chain link"))
                continue
            payload = parts[0]
            mode, chain_id, seq_text, prev, mac = (group.decode() for group in match.groups())
            seq = int(seq_text)
            if chain_id in broken:
                continue
            header = f"{VERSION}:{mode}:{chain_id}:{seq}:{prev}".encode()
            if mode == "h":
                report.unkeyed += 1
                good = hmac.compare_digest(_mac(None, header, payload), mac)
            elif key is not None:
                report.keyed += 1
                good = hmac.compare_digest(_mac(key, header, payload), mac)
            else:
                report.unchecked += 1
                good = True
            if not good:
                report.problems.append(_at(where, f"broken: line {seq} of chain {chain_id} was edited"))
                broken.add(chain_id)
                continue
            state = states.get(chain_id)
            expected = 1 if state is None else state.seq + 1
            problem = None
            if seq > expected:
                problem = f"missing: chain {chain_id} skips lines {expected}-{seq - 1}"
            elif seq < expected:
                problem = f"reordered: line {seq} of chain {chain_id} comes after line {expected - 1}"
            elif state is not None and prev != state.prev:
                problem = f"missing: line {seq} of chain {chain_id} does not follow line {state.seq}"
            elif state is None and prev != _ZERO:
                problem = f"missing: chain {chain_id} starts at a line that follows another"
            if problem is not None:
                report.problems.append(_at(where, problem))
                broken.add(chain_id)
                continue
            states[chain_id] = _State(seq, mac, where)
            report.chains[chain_id] = seq
    return report


def _at(where: Problem, reason: str) -> Problem:
    return Problem(where.path, where.line, reason)
