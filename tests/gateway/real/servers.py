"""Seven published MCP servers: how to start each over a state folder, a harmless call per tool,
a refusal the gateway must answer by name, and how to count each server's side effects.

A server's state (files, a git repository, a SQLite file, a knowledge-graph file) lives in one
folder that ``prepare`` lays out afresh, so the direct run and the gateway run of a test see the
same paths and the same starting state, and their results can be compared byte for byte.
"""

from __future__ import annotations

import base64
import re
import sqlite3
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.gateway.real.install import Installed

__all__ = ["SERVERS", "Call", "Server"]

Args = dict[str, Any]

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
"""A 1x1 PNG, for the filesystem server's media read."""

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.org",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.org",
    "GIT_AUTHOR_DATE": "1767323045 +0000",
    "GIT_COMMITTER_DATE": "1767323045 +0000",
}
"""Fixed identity and dates: a commit made directly and one made through the gateway are equal."""

_CLOCK = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
_WALL = re.compile(r"\b\d{1,2}:\d\d:\d\d (?:AM|PM)\b")
_JS_DATE = re.compile(r"\w{3} \w{3} \d\d \d{4} \d\d:\d\d:\d\d GMT[+-]\d{4} \([^)]*\)")


def clock_free(text: str) -> str:
    """``text`` with its wall-clock timestamps blanked (the two runs happen seconds apart)."""
    return _WALL.sub("<time>", _JS_DATE.sub("<time>", _CLOCK.sub("<time>", text)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """One harmless call of one tool."""

    tool: str
    arguments: Args
    clocked: bool = False
    """Its result carries the wall clock: compared with timestamps blanked."""


@dataclass(frozen=True, kw_only=True)
class Server:
    """A published MCP server as the tests drive it."""

    name: str
    """Also the upstream's name in the gateway config (no namespace: names stay the upstream's)."""
    registry: str
    package: str
    launch: Callable[[Installed, Path], tuple[list[str], dict[str, str]]]
    """``(installed, state) -> (command, env)``."""
    calls: Callable[[Path], list[Call]]
    """``state -> calls``, one or more per tool, in an order that makes sense for the server."""
    refused: Callable[[Path], tuple[str, Args, str]]
    """``state -> (tool, arguments, code)``: a call the gateway refuses by name before the upstream."""
    prepare: Callable[[Path], None] = lambda state: None
    effects: Callable[[Path], Any] = lambda state: None
    """What a write changes, read from the state folder: compared before and after."""
    uncallable: dict[str, str] = field(default_factory=dict)
    """Tools with no harmless direct call, and why."""


def _node(
    package: str, *args: str
) -> Callable[[Installed, Path], tuple[list[str], dict[str, str]]]:
    def launch(installed: Installed, state: Path) -> tuple[list[str], dict[str, str]]:
        entry = installed.npm_entry(f"@modelcontextprotocol/{package}")
        return [str(installed.node), str(entry), *(a.format(state=state) for a in args)], {}

    return launch


def _everything_calls(state: Path) -> list[Call]:
    return [
        Call(tool="echo", arguments={"message": "hello through the gateway"}),
        Call(
            tool="get-annotated-message", arguments={"messageType": "success", "includeImage": True}
        ),
        Call(tool="get-env", arguments={}),
        Call(tool="get-resource-links", arguments={"count": 2}),
        Call(
            tool="get-resource-reference",
            arguments={"resourceType": "Text", "resourceId": 1},
            clocked=True,  # "a plaintext resource created at 3:13:52 AM"
        ),
        Call(tool="get-structured-content", arguments={"location": "Chicago"}),
        Call(tool="get-sum", arguments={"a": 2, "b": 3}),
        Call(tool="get-tiny-image", arguments={}),
        Call(
            tool="gzip-file-as-resource",
            arguments={
                "name": "hello.gz",
                "data": "data:text/plain;base64,aGVsbG8=",
                "outputType": "resource",
            },
        ),
        Call(tool="toggle-simulated-logging", arguments={}),
        Call(tool="toggle-subscriber-updates", arguments={}),
        Call(tool="trigger-long-running-operation", arguments={"duration": 1, "steps": 2}),
    ]


def _files_prepare(state: Path) -> None:
    (state / "a.txt").write_text("alpha\nbeta\n")
    (state / "b.txt").write_text("bravo\n")
    (state / "pixel.png").write_bytes(PIXEL)


def _files_calls(state: Path) -> list[Call]:
    s = str(state)
    return [
        Call(tool="list_allowed_directories", arguments={}),
        Call(tool="read_file", arguments={"path": f"{s}/a.txt"}),
        Call(tool="read_text_file", arguments={"path": f"{s}/a.txt", "head": 1}),
        Call(tool="read_media_file", arguments={"path": f"{s}/pixel.png"}),
        Call(tool="read_multiple_files", arguments={"paths": [f"{s}/a.txt", f"{s}/b.txt"]}),
        Call(tool="write_file", arguments={"path": f"{s}/new.txt", "content": "new\n"}),
        Call(
            tool="edit_file",
            arguments={
                "path": f"{s}/a.txt",
                "edits": [{"oldText": "beta", "newText": "gamma"}],
                "dryRun": True,
            },
        ),
        Call(tool="create_directory", arguments={"path": f"{s}/made"}),
        Call(
            tool="move_file",
            arguments={"source": f"{s}/new.txt", "destination": f"{s}/made/new.txt"},
        ),
        Call(tool="list_directory", arguments={"path": s}),
        Call(tool="list_directory_with_sizes", arguments={"path": s, "sortBy": "name"}),
        Call(tool="directory_tree", arguments={"path": s}),
        Call(tool="search_files", arguments={"path": s, "pattern": "*.txt"}),
        Call(tool="get_file_info", arguments={"path": f"{s}/b.txt"}, clocked=True),
    ]


def _files_effects(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*"))


GRAPH = [
    {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},
    {"name": "Engine", "entityType": "machine", "observations": []},
]


def _memory_calls(state: Path) -> list[Call]:
    relation = {"from": "Ada", "to": "Engine", "relationType": "programmed"}
    return [
        Call(tool="create_entities", arguments={"entities": GRAPH}),
        Call(tool="create_relations", arguments={"relations": [relation]}),
        Call(
            tool="add_observations",
            arguments={"observations": [{"entityName": "Ada", "contents": ["born 1815"]}]},
        ),
        Call(tool="read_graph", arguments={}),
        Call(tool="search_nodes", arguments={"query": "Ada"}),
        Call(tool="open_nodes", arguments={"names": ["Ada"]}),
        Call(
            tool="delete_observations",
            arguments={"deletions": [{"entityName": "Ada", "observations": ["born 1815"]}]},
        ),
        Call(tool="delete_relations", arguments={"relations": [relation]}),
        Call(tool="delete_entities", arguments={"entityNames": ["Engine"]}),
    ]


def _memory_effects(state: Path) -> str:
    path = state / "memory.jsonl"
    return path.read_text() if path.exists() else ""


def _time_calls(state: Path) -> list[Call]:
    return [
        Call(tool="get_current_time", arguments={"timezone": "UTC"}, clocked=True),
        Call(
            tool="convert_time",
            arguments={"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"},
        ),
    ]


def _git(state: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(state / "repo"), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={**GIT_ENV, "PATH": "/usr/bin:/bin", "HOME": str(state)},
    )
    return done.stdout


def _git_prepare(state: Path) -> None:
    (state / "repo").mkdir()
    _git(state, "init", "-q", "-b", "main")
    (state / "repo" / "a.txt").write_text("alpha\n")
    _git(state, "add", "a.txt")
    _git(state, "commit", "-q", "-m", "first")
    (state / "repo" / "a.txt").write_text("alpha\nbeta\n")


def _git_calls(state: Path) -> list[Call]:
    repo = {"repo_path": str(state / "repo")}
    return [
        Call(tool="git_status", arguments=repo),
        Call(tool="git_diff_unstaged", arguments=repo),
        Call(tool="git_add", arguments={**repo, "files": ["a.txt"]}),
        Call(tool="git_diff_staged", arguments=repo),
        Call(tool="git_commit", arguments={**repo, "message": "second"}),
        Call(tool="git_log", arguments={**repo, "max_count": 5}),
        Call(tool="git_show", arguments={**repo, "revision": "HEAD"}),
        Call(tool="git_create_branch", arguments={**repo, "branch_name": "feature"}),
        Call(tool="git_checkout", arguments={**repo, "branch_name": "feature"}),
        Call(tool="git_branch", arguments={**repo, "branch_type": "local"}),
        Call(tool="git_diff", arguments={**repo, "target": "main"}),
        Call(tool="git_reset", arguments=repo),
    ]


def _git_effects(state: Path) -> str:
    return _git(state, "log", "--all", "--format=%H %s")


def _fetch_calls(state: Path) -> list[Call]:
    url = (state / "url.txt").read_text()
    return [Call(tool="fetch", arguments={"url": url, "max_length": 400})]


def _sqlite_calls(state: Path) -> list[Call]:
    return [
        Call(
            tool="create_table",
            arguments={"query": "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)"},
        ),
        Call(tool="write_query", arguments={"query": "INSERT INTO notes (body) VALUES ('hello')"}),
        Call(tool="read_query", arguments={"query": "SELECT id, body FROM notes"}),
        Call(tool="list_tables", arguments={}),
        Call(tool="describe_table", arguments={"table_name": "notes"}),
        Call(tool="append_insight", arguments={"insight": "notes hold greetings"}),
    ]


def _sqlite_effects(state: Path) -> list[tuple[Any, ...]]:
    path = state / "test.db"
    if not path.exists():
        return []
    with sqlite3.connect(path) as db:
        tables = [
            row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        return [(t, *db.execute(f'SELECT count(*) FROM "{t}"').fetchone()) for t in tables]


def _py(
    venv: str, script: str, *args: str, env: dict[str, str] | None = None
) -> Callable[[Installed, Path], tuple[list[str], dict[str, str]]]:
    def launch(installed: Installed, state: Path) -> tuple[list[str], dict[str, str]]:
        return [str(installed.script(venv, script)), *(a.format(state=state) for a in args)], dict(
            env or {}
        )

    return launch


SERVERS = [
    Server(
        name="everything",
        registry="npm",
        package="@modelcontextprotocol/server-everything",
        launch=_node("server-everything", "stdio"),
        calls=_everything_calls,
        refused=lambda state: ("get-sum", {"a": 2, "b": "3"}, "INVALID_ARGUMENTS"),
        uncallable={"simulate-research-query": "taskSupport: required (only callable as a task)"},
    ),
    Server(
        name="filesystem",
        registry="npm",
        package="@modelcontextprotocol/server-filesystem",
        launch=_node("server-filesystem", "{state}"),
        prepare=_files_prepare,
        calls=_files_calls,
        refused=lambda state: (
            "read_text_file",
            {"path": f"{state}/a.txt", "encoding": "latin-1"},
            "INVALID_ARGUMENTS",
        ),
        effects=_files_effects,
    ),
    Server(
        name="memory",
        registry="npm",
        package="@modelcontextprotocol/server-memory",
        launch=lambda installed, state: (
            _node("server-memory")(installed, state)[0],
            {"MEMORY_FILE_PATH": str(state / "memory.jsonl")},
        ),
        calls=_memory_calls,
        refused=lambda state: ("delete_entities", {"entityNames": "Ada"}, "INVALID_ARGUMENTS"),
        effects=_memory_effects,
    ),
    Server(
        name="time",
        registry="PyPI",
        package="mcp-server-time",
        launch=_py("servers", "mcp-server-time", "--local-timezone", "UTC"),
        calls=_time_calls,
        refused=lambda state: (
            "convert_time",
            {"source_timezone": "UTC", "time": "12:00"},
            "INVALID_ARGUMENTS",
        ),
    ),
    Server(
        name="git",
        registry="PyPI",
        package="mcp-server-git",
        launch=_py("servers", "mcp-server-git", "--repository", "{state}/repo", env=GIT_ENV),
        prepare=_git_prepare,
        calls=_git_calls,
        refused=lambda state: (
            "git_log",
            {"repo_path": str(state / "repo"), "max_count": "5"},
            "INVALID_ARGUMENTS",
        ),
        effects=_git_effects,
    ),
    Server(
        name="fetch",
        registry="PyPI",
        package="mcp-server-fetch",
        launch=_py("servers", "mcp-server-fetch", "--ignore-robots-txt", "--allow-private-ips"),
        calls=_fetch_calls,
        refused=lambda state: (
            "fetch",
            {"url": "http://127.0.0.1/", "max_length": 0},
            "INVALID_ARGUMENTS",
        ),
    ),
    Server(
        name="sqlite",
        registry="PyPI",
        package="mcp-server-sqlite",
        launch=_py("sqlite", "mcp-server-sqlite", "--db-path", "{state}/test.db"),
        calls=_sqlite_calls,
        refused=lambda state: (
            "read_query",
            {"query": "SELECT 1", "limit": 5},
            "INVALID_ARGUMENTS",
        ),
        effects=_sqlite_effects,
    ),
]
"""The seven, three reference servers from npm and four from PyPI."""
