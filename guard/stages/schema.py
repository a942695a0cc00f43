"""Stage 3: strict validation against the tool's pydantic model; every problem named for the model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from guard.call import Call
from guard.codes import Code
from guard.result import Problem, ToolResult
from guard.stages.base import Env, reject

__all__ = ["MAX_PROBLEMS", "SchemaStage", "problems_from"]

MAX_PROBLEMS = 20
"""An INVALID_ARGUMENTS answer names at most this many problems (and counts the rest)."""

GOT_LIMIT = 40
"""Characters of a rejected value echoed back: enough to recognise, too few to carry a payload."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SchemaStage:
    """No coercion ("2590" and 25.9 are not integers), no extra fields, required fields required.

    Validation is pydantic's strict mode on the decoded object; what it refuses is tried once more
    in strict JSON mode, which takes what JSON can only spell one way (an array for a tuple, ISO
    text for a date, a value for an enum) and nothing else, so a failing call pays for it only.

    The canonical form of the validated arguments (declaration order, compact JSON) is what keys,
    loop counts and approvals are computed from, so formatting differences are one call.
    """

    env: Env
    name: str = "schema"

    def __call__(self, call: Call) -> ToolResult | None:
        spec = call.spec
        assert spec is not None  # resolve ran
        try:
            arguments = spec.validate(call.parsed)
        except ValidationError:
            arguments = None
        if arguments is None:
            try:  # JSON's own strictness: arrays are tuples, ISO text is a date, a value an enum
                arguments = spec.validate_json(call.raw_arguments or "")
            except ValidationError as error:
                call.problems = tuple(
                    problems_from(spec.arguments, error.errors(include_url=False))
                )
        if arguments is None:
            # Bounded: 2,000 unknown fields would otherwise be a 300,000-character answer.
            shown, more = call.problems[:MAX_PROBLEMS], len(call.problems) - MAX_PROBLEMS
            listed = "; ".join(problem.sentence()[:300] for problem in shown)
            if more > 0:
                listed += f"; and {more} more problems"
            data: dict[str, object] = {"problems": [p.to_dict() for p in shown]}
            if more > 0:
                data["more_problems"] = more
            return reject(
                call,
                Code.INVALID_ARGUMENTS,
                f"Invalid arguments for {spec.name}: {listed}. Fix these fields and call again; "
                "do not guess values the user did not give, ask them.",
                data=data,
            )
        call.arguments = arguments
        call.canonical = spec.canonical(arguments)
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


_CONTAINERS = {"List": "items", "Tuple": "items", "Set": "items", "Dictionary": "entries"}
_CROSS_FIELD = {"value_error": "Value error, ", "assertion_error": "Assertion failed, "}
"""Errors a validator raised (a model_validator across fields, or a field's own): pydantic's prefix
is dropped and the validator's message is the rule."""


def _expected(error: ErrorDetails) -> str:
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    kind = error["type"]
    if kind in _CROSS_FIELD:
        return error["msg"].removeprefix(_CROSS_FIELD[kind])
    if kind == "missing" and error["loc"] and isinstance(error["loc"][-1], int):
        return "another item: the array is too short"
    if kind in ("too_short", "too_long"):
        unit = _CONTAINERS.get(str(ctx.get("field_type")), "items")
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        if kind == "too_short" and bound == 1:
            return f"at least one of its {unit}: it must not be empty"
        return f"{'at least' if kind == 'too_short' else 'at most'} {bound} {unit}"
    words = {
        "missing": "a value: this field is required",
        "extra_forbidden": "no such field: remove it",
        "int_type": "an integer (a JSON number without a fraction, not a string)",
        "string_type": "a string",
        "bool_type": "true or false",
        "float_type": "a number",
        "model_type": "an object",
        "list_type": "an array",
        "tuple_type": "an array",
        "set_type": "an array of distinct values",
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
    return error["msg"].removeprefix("Input should be ")


def _got(model: type[BaseModel], error: ErrorDetails) -> str:
    if error["type"] == "missing":
        return "nothing"
    if error["type"] in _CROSS_FIELD and not error["loc"]:
        return ""  # the rule names the fields; echoing every argument helps nobody
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
        if text[end] in " ,;" and not (
            text[end - 1].isdigit() and text[end + 1 : end + 2].isdigit()
        ):
            return text[:end] + "…"
    return f"{len(text)} characters"


def _hint(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    # Walk nested models along the path (through lists, tuples, dicts and optionals) so a nested
    # field gets its own description.
    current: type[BaseModel] | None = model
    description: str | None = None
    for part in loc:
        if current is None or not isinstance(part, str):
            continue
        info = current.model_fields.get(part)
        if info is None:
            return None
        description = info.description
        current = _nested_model(info.annotation)
    return description


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in get_args(annotation):
        if (found := _nested_model(argument)) is not None:
            return found
    return None
