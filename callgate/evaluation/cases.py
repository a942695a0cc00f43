"""The labelled case file: one JSON object per line, each a conversation and the calls it should make.

A line::

    {"id": "5", "principal": "CUS-1",
     "expected": [{"name": "get_order", "arguments": {"order_id": "ORD-1001"}}],
     "observed": [{"name": "get_order", "arguments": "{\\"order_id\\": \\"ORD-1001\\"}"}],
     "messages": [{"role": "user", "content": "Where is my order ORD-1001?"}],
     "adversarial": false, "tags": ["status"]}

``expected: []`` means the right action is no tool call. ``arguments`` may be an object or a JSON
string (as providers send it). ``principal`` is the user id (the app's default role) or an object
``{"id", "role", "scopes"}``. ``observed`` may be absent when a model produces the calls; then
``messages`` (or the shorthand ``"input": "user text"``) is the conversation it gets.

A line that is not such an object is reported with its number and skipped; the lines around it
still count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

__all__ = ["CaseError", "CaseFile", "EvalCase", "ExpectedCall", "PrincipalSpec", "load_cases"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PrincipalSpec(_Strict):
    """Who the conversation acts for."""

    id: str = Field(min_length=1)
    role: str | None = None
    """None: the app's default role."""
    scopes: tuple[str, ...] | None = None
    """None: the scopes the app gives the role."""


class ExpectedCall(_Strict):
    """A tool call: its name and arguments (an object, or JSON text as a provider sends it)."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    def text(self) -> str:
        """The arguments as JSON text, the form the guard receives."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


class EvalCase(_Strict):
    """One labelled conversation."""

    id: str = Field(min_length=1)
    principal: PrincipalSpec
    expected: tuple[ExpectedCall, ...]
    observed: tuple[ExpectedCall, ...] | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    adversarial: bool = False
    tags: tuple[str, ...] = ()

    @field_validator("principal", mode="before")
    @classmethod
    def _principal(cls, value: Any) -> Any:
        return {"id": value} if isinstance(value, str) else value

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: Any) -> Any:
        # Case ids are labels; "5" and 5 are the same case in a hand-written file.
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("expected", "observed", "messages", "tags", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return tuple(value) if isinstance(value, list) else value


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseError:
    """A line of the case file that was skipped, and why."""

    line: int
    error: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CaseFile:
    """The cases that parsed, in file order, and the lines that did not."""

    cases: tuple[EvalCase, ...]
    errors: tuple[CaseError, ...]


def load_cases(lines: Iterable[str]) -> CaseFile:
    """Parse a case file. Blank lines are ignored; bad lines and repeated ids are reported, skipped."""
    cases: list[EvalCase] = []
    errors: list[CaseError] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("a case must be a JSON object")
            _encodable(record)
            if "input" in record and "messages" not in record:
                record["messages"] = [{"role": "user", "content": record.pop("input")}]
            case = EvalCase.model_validate(record)
        except ValidationError as error:
            errors.append(CaseError(line=number, error=_first_problem(error)))
            continue
        except json.JSONDecodeError as error:
            errors.append(CaseError(line=number, error=f"not JSON: {error}"))
            continue
        except (ValueError, RecursionError) as error:  # not an object, surrogates, nesting
            errors.append(CaseError(line=number, error=str(error)[:200] or "nested too deeply"))
            continue
        if case.id in seen:
            errors.append(CaseError(line=number, error=f"case id {case.id!r} is used twice"))
            continue
        seen.add(case.id)
        cases.append(case)
    return CaseFile(cases=tuple(cases), errors=tuple(errors))


def _encodable(record: Any) -> None:
    # A lone surrogate (the JSON escape \ud800, or undecodable bytes read with surrogateescape)
    # cannot be written to the results, the database or a terminal: refuse the line, say why.
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError("it holds text UTF-8 cannot carry (a lone surrogate)") from error


def _first_problem(error: ValidationError) -> str:
    problems = error.errors(include_url=False)
    first = problems[0]
    where = "/".join(str(part) for part in first["loc"]) or "(the line)"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first['msg']}{more}"
