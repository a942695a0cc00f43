"""Stage 3: strict validation against the tool's pydantic model; every problem named for the model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from guard.call import Call
from guard.codes import Code
from guard.result import Problem, ToolResult
from guard.stages.base import Env, reject

__all__ = ["SchemaStage", "problems_from"]

GOT_LIMIT = 40
"""Characters of a rejected value echoed back: enough to recognise, too few to carry a payload."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaStage:
    """No coercion ("2590" and 25.9 are not integers), no extra fields, required fields required.

    The canonical form of the validated arguments (declaration order, compact JSON) is what keys,
    loop counts and approvals are computed from, so formatting differences are one call.
    """

    env: Env
    name: str = "schema"

    def __call__(self, call: Call) -> ToolResult | None:
        assert call.spec is not None  # resolve ran
        try:
            arguments = call.spec.validate(call.parsed)
        except ValidationError as error:
            call.problems = tuple(
                problems_from(call.spec.arguments, error.errors(include_url=False))
            )
            listed = "; ".join(_sentence(p) for p in call.problems)
            return reject(
                call,
                Code.INVALID_ARGUMENTS,
                f"Invalid arguments for {call.spec.name}: {listed}. Fix these fields and call again; "
                "do not guess values the user did not give, ask them.",
                data={"problems": [p.to_dict() for p in call.problems]},
            )
        call.arguments = arguments
        call.canonical = call.spec.canonical(arguments)
        return None


def problems_from(model: type[BaseModel], errors: list[ErrorDetails]) -> list[Problem]:
    """Turns pydantic's errors into problems: JSON pointer, rule, expected, got, and the field's hint."""
    return [
        Problem(
            path=_pointer(error["loc"]),
            rule=error["type"],
            expected=_expected(error),
            got=_got(model, error),
            hint=_hint(model, error["loc"]),
        )
        for error in errors
    ]


def _pointer(loc: tuple[int | str, ...]) -> str:
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in loc)


def _expected(error: ErrorDetails) -> str:
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    kind = error["type"]
    words = {
        "missing": "a value: this field is required",
        "extra_forbidden": "no such field: remove it",
        "int_type": "an integer (a JSON number without a fraction, not a string)",
        "string_type": "a string",
        "bool_type": "true or false",
        "float_type": "a number",
        "model_type": "an object",
        "list_type": "an array",
        "dict_type": "an object",
    }
    if kind in words:
        return words[kind]
    if kind == "literal_error" or kind == "enum":
        return f"one of {ctx.get('expected', '')}"
    if kind == "string_pattern_mismatch":
        return f"text matching {ctx.get('pattern', '')}"
    for bound, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if bound in ctx:
            return f"a number {sign} {ctx[bound]}"
    if "min_length" in ctx:
        return f"at least {ctx['min_length']} characters"
    if "max_length" in ctx:
        return f"at most {ctx['max_length']} characters"
    return error["msg"]


def _got(model: type[BaseModel], error: ErrorDetails) -> str:
    if error["type"] == "missing":
        return "nothing"
    loc = error["loc"]
    info = model.model_fields.get(str(loc[0])) if loc else None
    extra = info.json_schema_extra if info is not None else None
    if isinstance(extra, dict) and extra.get("sensitive"):
        return "a value (not echoed: the field is sensitive)"
    try:
        text = json.dumps(error["input"], ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(error["input"])
    return text if len(text) <= GOT_LIMIT else _cut(text)


def _cut(text: str) -> str:
    """``text`` cut between tokens, never inside a word or a number (``4111 1111 ...``), so that
    masking downstream sees whole values: a cut card number no longer passes for harmless digits."""
    for end in range(GOT_LIMIT - 1, 0, -1):
        if text[end] in " ,;" and not (text[end - 1].isdigit() and text[end + 1 : end + 2].isdigit()):
            return text[:end] + "…"
    return f"{len(text)} characters"


def _hint(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    # Walk nested models along the path so a nested field gets its own description.
    current: type[BaseModel] | None = model
    description: str | None = None
    for part in loc:
        if current is None or not isinstance(part, str):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return None
        description = info.description
        annotation = info.annotation
        current = (
            annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel)
            else None
        )
    return description


def _sentence(problem: Problem) -> str:
    text = f"{problem.path or '/'} expected {problem.expected}, got {problem.got}"
    return f"{text} ({problem.hint})" if problem.hint else text
