"""Fixtures for the telemetry tests: hand-built call records, the shop with telemetry, free ports."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from guard.call import Call, RetryRecord
from guard.codes import Code
from guard.registry import Effect, Risk, ToolSpec
from guard.result import Outcome, Problem, ToolResult
from guard.session import Principal
from telemetry import Masker
from telemetry import attributes as attr

KEY = b"test-deployment-key"


class PayArgs(BaseModel):
    """A tool with a field the schema marks sensitive."""

    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: str
    card_number: str = Field(json_schema_extra={"sensitive": True})
    note: str = ""


def _noop(args: Any, ctx: Any) -> None:
    return None


PAY = ToolSpec(
    name="pay",
    description="Pay an order.",
    arguments=PayArgs,
    handler=_noop,
    effect=Effect.WRITE,
    risk=Risk.HIGH,
)

STAGES = attr.STAGES


def make_call(
    *,
    tool: str = "pay",
    spec: ToolSpec | None = PAY,
    arguments: dict[str, Any] | None = None,
    raw: str | None = None,
    code: Code = Code.OK,
    stages: tuple[str, ...] = STAGES,
    retries: int = 0,
    **fields: Any,
) -> tuple[Call, ToolResult]:
    """A finished call as the pipeline would report it: every stage passed, the last one ended it."""
    start = time.time_ns()
    arguments = arguments if arguments is not None else {"order_id": "ORD-1001", "card_number": "x"}
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    call = Call(
        tool=tool,
        raw_arguments=raw if raw is not None else canonical,
        call_id="call_1",
        session_id="s-0042",
        principal=Principal(id="CUS-1", role="customer"),
        turn=1,
        start_ns=start,
    )
    call.step, call.spec = 1, spec
    if raw is None and code not in (Code.INVALID_JSON, Code.INVALID_ARGUMENTS, Code.UNKNOWN_TOOL):
        call.parsed = arguments
        call.canonical = canonical
    call.chain = stages
    call.marks = [start + index * 1_000 for index in range(len(stages) + 1)]
    call.retries = tuple(
        RetryRecord(attempt=attempt, error="TransientError", delay=0.05, at_ns=start + 8_100)
        for attempt in range(1, retries + 1)
    )
    call.attempts = retries + 1 if "execute" in stages else 0
    approval_id = fields.pop("approval_id", None)
    for name, value in fields.items():
        setattr(call, name, tuple(value) if isinstance(value, list) else value)
    call.end_ns = start + len(stages) * 1_000 + 100
    result = ToolResult(
        ok=code.ok,
        code=code,
        message="done" if code.ok else f"rejected: {code}",
        outcome=Outcome.APPLIED if code.ok else Outcome.NOT_APPLIED,
        call_id=call.call_id,
        tool=tool,
        approval_id=approval_id,
    )
    call.result = result
    return call, result


def problem(path: str) -> Problem:
    return Problem(path=path, rule="extra_forbidden", expected="no such field", got="?")


@pytest.fixture
def masker() -> Masker:
    return Masker(key=KEY)


@pytest.fixture
def trail_dir(tmp_path: Path) -> Path:
    return tmp_path / "trail"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sidecar(
    args: list[str], *, port: int, prelude: str = "", preexec_fn: Any = None
) -> subprocess.Popen[bytes]:
    """``callgate sidecar ARGS`` in a subprocess, returned once ``port`` accepts connections.

    ``prelude`` is Python run first in the child (e.g. to ignore SIGXFSZ)."""
    code = f"import sys; {prelude}from telemetry.cli import sidecar; sidecar(sys.argv[1:])"
    process = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        preexec_fn=preexec_fn,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if time.monotonic() >= deadline:
                process.kill()
                process.communicate(timeout=20)
                raise AssertionError("sidecar did not start") from None
            time.sleep(0.1)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nothing listens on."""
    yield free_port()


def attribute_value(value: dict[str, Any]) -> Any:
    """An OTLP JSON AnyValue as a Python value."""
    ((kind, inner),) = value.items()
    if kind == "intValue":
        return int(inner)
    if kind == "arrayValue":
        return [attribute_value(item) for item in inner.get("values", [])]
    return inner


def read_spans(directory: Path) -> list[dict[str, Any]]:
    """Every span in the trail files under ``directory``, with ``attrs`` as a plain dict."""
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:  # NDJSON: \n only
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans.get("scopeSpans", []):
                    for span in scope_spans["spans"]:
                        span["attrs"] = {
                            item["key"]: attribute_value(item["value"])
                            for item in span.get("attributes", [])
                        }
                        spans.append(span)
    return spans
