"""``callgate doctor``: are the top-level packages Python imports as callgate's really callgate's?

callgate installs five top-level names (:data:`ROOTS`). PyPI has other distributions that install
some of them (Segment's ``analytics-python`` installs ``analytics``; there are distributions named
``guard`` and ``telemetry``), and pip lets the later install overwrite the earlier one's files
without a word. Two checks, both from installed metadata (``importlib.metadata``), nothing imported:

- another distribution owns one of the names (its ``top_level.txt`` or its ``RECORD``);
- the package Python would import under a name is not callgate's: it lives somewhere other than
  beside the ``callgate`` package, or its files no longer match the hashes callgate's ``RECORD``
  holds for them (the other distribution was installed afterwards, over callgate's files).

The CLI runs the same checks when a command's import from a root package fails, so the user reads
which distribution is in the way instead of a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import click

__all__ = [
    "DISTRIBUTION",
    "ROOTS",
    "Finding",
    "doctor",
    "find_problems",
    "owners",
    "top_level_names",
]

DISTRIBUTION = "callgate"
ROOTS = ("analytics", "callgate", "dashboards", "guard", "telemetry")
"""The top-level names callgate installs (``[tool.setuptools.packages.find]`` in pyproject.toml)."""

_REMEDY = (
    "uninstall it (pip uninstall {other}), or install callgate into a virtual environment of "
    "its own (python -m venv .venv && .venv/bin/pip install callgate); then restore callgate's "
    "files: pip install --force-reinstall --no-deps callgate"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One top-level name that is not, or not only, callgate's."""

    root: str
    """The top-level name (``analytics``)."""
    problem: str
    """What is wrong, naming the other distribution when one is known."""
    remedy: str
    """What to do about it."""

    def __str__(self) -> str:
        return f"{self.root}: {self.problem}; {self.remedy}"


def _name(dist: metadata.Distribution) -> str:
    return str(dist.metadata["Name"] or "?")


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def top_level_names(dist: metadata.Distribution) -> set[str]:
    """The importable top-level names a distribution installs: ``top_level.txt`` and ``RECORD``."""
    names = set((dist.read_text("top_level.txt") or "").split())
    for file in dist.files or ():
        first = file.parts[0] if file.parts else ""
        if first in ("..", "__pycache__") or first.startswith("__editable__"):
            continue
        if first.endswith((".dist-info", ".egg-info", ".data", ".pth")):
            continue
        if len(file.parts) == 1:
            if first.endswith(".py"):
                names.add(first[:-3])
            continue
        names.add(first)
    return names


def _distributions() -> Iterator[metadata.Distribution]:
    """Each installed distribution once (the first on ``sys.path``, as pip and Python see it)."""
    seen: set[str] = set()
    for dist in metadata.distributions():
        key = _normal(_name(dist))
        if key not in seen:
            seen.add(key)
            yield dist


def owners(root: str) -> list[str]:
    """``name version`` of every installed distribution but callgate that installs ``root``."""
    return sorted(
        f"{_name(dist)} {dist.version}"
        for dist in _distributions()
        if _normal(_name(dist)) != DISTRIBUTION and root in top_level_names(dist)
    )


def _location(root: str) -> Path | None:
    """Where Python would import ``root`` from (its package directory), without importing it."""
    try:
        spec = importlib.util.find_spec(root)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    return Path(spec.origin).resolve() if spec.origin else None


def _home() -> Path:
    """The directory that holds this ``callgate`` package: every root is meant to sit beside it."""
    return Path(__file__).resolve().parent.parent


def _digest(path: Path) -> str:
    raw = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _changed_files(root: str, location: Path) -> list[str]:
    """Files of ``root`` that no longer match callgate's RECORD (empty when it records none here)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return []
    changed = []
    for file in dist.files or ():
        if not file.parts or file.parts[0] != root or file.hash is None:
            continue
        path = Path(str(file.locate())).resolve()
        if location not in path.parents:
            continue  # callgate's RECORD describes another copy than the one Python imports
        if not path.is_file() or _digest(path) != f"{file.hash.mode}={file.hash.value}":
            changed.append(str(file))
    return changed


def _owner_of(location: Path) -> str | None:
    """The distribution whose RECORD lists a file under ``location``, if one does."""
    for dist in _distributions():
        if _normal(_name(dist)) == DISTRIBUTION:
            continue
        for file in dist.files or ():
            if location in Path(str(file.locate())).resolve().parents:
                return f"{_name(dist)} {dist.version}"
    return None


def _check(root: str) -> Iterator[Finding]:
    others = owners(root)
    other = others[0].split()[0] if others else "the other distribution"
    remedy = _REMEDY.format(other=other)
    location = _location(root)
    if location is None:
        yield Finding(
            root=root,
            problem="not importable: callgate's install is incomplete",
            remedy="pip install --force-reinstall --no-deps callgate",
        )
        return
    if location.parent != _home():
        owner = _owner_of(location) or (others[0] if others else None)
        by = f", installed by {owner}" if owner else ""
        yield Finding(
            root=root,
            problem=f"Python imports it from {location}{by}, not callgate's beside {_home()}",
            remedy=_REMEDY.format(other=owner.split()[0] if owner else other),
        )
        return
    changed = _changed_files(root, location)
    if changed:
        by = f" (most likely by {', '.join(others)})" if others else ""
        shown = ", ".join(changed[:3]) + (", ..." if len(changed) > 3 else "")
        yield Finding(
            root=root,
            problem=f"{len(changed)} of callgate's files were overwritten{by}: {shown}",
            remedy=remedy,
        )
        return
    if others:
        yield Finding(
            root=root,
            problem=f"also installed by {', '.join(others)}: one overwrites the other's files",
            remedy=remedy,
        )


def find_problems(roots: Iterable[str] = ROOTS) -> list[Finding]:
    """Every finding for ``roots``, in their order; empty when each is callgate's alone."""
    return [finding for root in roots for finding in _check(root)]


@click.command()
def doctor() -> None:
    """Check that the packages callgate installs are callgate's, not another distribution's.

    For each top-level name callgate installs (analytics, callgate, dashboards, guard, telemetry):
    another installed distribution that also installs it, or a package Python would import under
    it that is not callgate's (elsewhere on the path, or its files overwritten).

    \b
    Examples:
      callgate doctor
      python -m callgate doctor   # when another package's `callgate` shadows the command

    Exit codes: 0 every name is callgate's alone, 1 a finding (each named, with what to do).
    """
    problems = find_problems(ROOTS)
    for problem in problems:
        click.echo(str(problem), err=True)
    if problems:
        raise SystemExit(1)
    click.echo(f"ok: {', '.join(ROOTS)} are callgate's alone (in {_home()})")
