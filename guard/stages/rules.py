"""Stage 5: what must have happened first, then the tool's own checks against current state."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from guard.call import Call
from guard.codes import Code, DomainCode, ReasonCode
from guard.errors import HumanRequired, RuleViolation, TransientError
from guard.provenance import Provenance
from guard.refusals import as_refusal
from guard.registry import AnyOf, CheckContext, Requirement, SeenIn, ToolSpec
from guard.result import Problem, ToolResult
from guard.stages.base import Env, counted, reject

__all__ = [
    "RuleStage",
    "check_context",
    "ran_key",
    "refuse_undeclared",
    "remember",
    "seen_key",
    "value_key",
    "values_at",
]

log = logging.getLogger("guard")


def seen_key(session_id: str, tool: str, record: object) -> str:
    """Marks that ``tool`` succeeded for ``record`` in the session (for prerequisites)."""
    return f"seen:{session_id}:{tool}:{record}"


def ran_key(session_id: str, tool: str) -> str:
    """Marks that ``tool`` succeeded at all in the session (for prerequisites without a record)."""
    return f"ran:{session_id}:{tool}"


def value_key(session_id: str, tool: str, path: str, value: object) -> str:
    """Marks that ``value`` appeared at ``path`` in a result of ``tool`` in the session (``SeenIn``)."""
    return f"value:{session_id}:{tool}:{path}:{_text(value)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleStage:
    """Prerequisites first (they reveal nothing about the record), then the tool's business check.

    A check refuses by raising ``RuleViolation``; its code and message become the result. A check that
    cannot tell a foreign record from a missing one is the point: both are NOT_FOUND, word for word.
    A check lets the call through with a warning by calling ``ctx.warn``.
    """

    env: Env
    name: str = "rules"

    def __call__(self, call: Call) -> ToolResult | None:
        spec, arguments = call.spec, call.arguments
        assert spec is not None and arguments is not None  # schema ran
        for need in spec.requirements:
            if (missing := self._missing(call, spec, need)) is not None:
                return missing
        if spec.check is None:
            return None
        context = check_context(call, self.env)
        try:
            try:
                spec.check(arguments, context)
            except Exception as error:  # a library's own exception, mapped to a refusal
                raise as_refusal(error, spec.refusals, self.env.refusals) or error from None
        except HumanRequired as asked:
            context.ask_human(asked.code, asked.message)
        except RuleViolation as violation:
            if (undeclared := refuse_undeclared(call, self.env, violation.code)) is not None:
                return undeclared
            call.problems = violation.problems
            return reject(
                call,
                violation.code,
                violation.message,
                data=violation.data,
                fixable=violation.fixable,
            )
        except (TransientError, TimeoutError, ConnectionError):
            log.warning(
                "business check of %s could not read current state", spec.name, exc_info=True
            )
            return reject(
                call,
                Code.UPSTREAM_UNAVAILABLE,
                "The service is unavailable right now. Nothing was done; tell the user to try later.",
            )
        except Exception:
            log.exception("business check of %s raised", spec.name)
            return reject(call, Code.INTERNAL_ERROR, _INTERNAL)
        for warning in context.warnings:
            if (undeclared := refuse_undeclared(call, self.env, warning.code)) is not None:
                return undeclared
        if context.warnings:
            call.warnings = tuple(context.warnings)
        if context.human is not None and call.approval is None:
            return _ask_human(call, *context.human)
        return None

    def reads(self, call: Call) -> list[str]:
        """Every mark the prerequisites may read, for a store that batches to read ahead."""
        assert call.spec is not None
        return [key for need in call.spec.requirements for key in _marks(call, need)]

    def _missing(self, call: Call, spec: ToolSpec, need: Requirement) -> ToolResult | None:
        counters, sid = self.env.counters, call.session_id
        if isinstance(need, AnyOf):
            return self._none_of(call, spec, need)
        if isinstance(need, SeenIn):
            return self._unseen(call, spec, need)
        tools = need.tools
        if need.field is None:
            if any(counted(call, counters, ran_key(sid, name)) for name in tools):
                return None
            return reject(
                call,
                Code.PREREQUISITE_MISSING,
                f"Call {_either(tools)} first, then call {spec.name} again.",
                data={"call_first": list(tools)},
            )
        record = getattr(call.arguments, need.field)
        if any(counted(call, counters, seen_key(sid, name, record)) for name in tools):
            return None
        return reject(
            call,
            Code.PREREQUISITE_MISSING,
            f"Call {_either(tools)} for {need.field}={record} first, check the result with the "
            f"user, then call {spec.name} again.",
            data={"call_first": list(tools)},
        )

    def _none_of(self, call: Call, spec: ToolSpec, need: AnyOf) -> ToolResult | None:
        """Either-or: the first option that holds lets the call through; when none does, the
        model is told every way, and the problems of them all are kept."""
        missing: list[ToolResult] = []
        found: list[Problem] = []
        for option in need.options:
            call.problems = ()
            if (result := self._missing(call, spec, option)) is None:
                return None
            missing.append(result)
            found += call.problems
        call.problems = tuple(found)
        problems = [p for r in missing for p in (r.data or {}).get("problems", ())]
        call_first = list(dict.fromkeys(t for r in missing for t in (r.data or {})["call_first"]))
        return reject(
            call,
            Code.PREREQUISITE_MISSING,
            " Or: ".join(r.message for r in missing),
            data={"call_first": call_first, **({"problems": problems} if problems else {})},
        )

    def _unseen(self, call: Call, spec: ToolSpec, need: SeenIn) -> ToolResult | None:
        counters, sid = self.env.counters, call.session_id
        value = getattr(call.arguments, need.field)
        items = list(enumerate(value)) if isinstance(value, list | tuple) else [(None, value)]
        problems = [
            Problem(
                path=f"/{need.field}" + ("" if index is None else f"/{index}"),
                rule="seen_in",
                expected=f"a value from a {_either(need.tools)} result ({_either(need.paths)})",
                got=_got(item),
            )
            for index, item in items
            if not any(
                counted(call, counters, value_key(sid, name, path, item))
                for name in need.tools
                for path in need.paths
            )
        ]
        if not problems:
            return None
        call.problems = tuple(problems)
        return reject(
            call,
            Code.PREREQUISITE_MISSING,
            f"{'; '.join(p.sentence() for p in problems)}. Call {_either(need.tools)} first and use "
            f"the {need.field} it returns, then call {spec.name} again; do not guess ids.",
            data={"problems": [p.to_dict() for p in problems], "call_first": list(need.tools)},
        )


def _marks(call: Call, need: Requirement) -> Iterator[str]:
    """The marks ``RuleStage._missing`` may read for ``need``: the keys it derives, all options."""
    sid = call.session_id
    if isinstance(need, AnyOf):
        for option in need.options:
            yield from _marks(call, option)
    elif isinstance(need, SeenIn):
        value = getattr(call.arguments, need.field)
        for item in value if isinstance(value, list | tuple) else [value]:
            for name in need.tools:
                yield from (value_key(sid, name, path, item) for path in need.paths)
    elif need.field is None:
        yield from (ran_key(sid, name) for name in need.tools)
    else:
        record = getattr(call.arguments, need.field)
        yield from (seen_key(sid, name, record) for name in need.tools)


def check_context(call: Call, env: Env) -> CheckContext[Any]:
    """What a check (or ``risk_by``) of ``call`` may know: who asks, the deps, the provenance."""
    ledger = env.provenance
    lookup = None
    if ledger is not None:
        session_id, now = call.session_id, call.now

        def lookup(value: object) -> Provenance:
            return ledger.lookup(session_id, value, now=now)

    deps = env.deps if call.deps is None else call.deps
    return CheckContext(
        principal=call.principal,
        session_id=call.session_id,
        deps=deps,
        lookup=lookup,
        approval_id=call.approval.id if call.approval is not None else None,
    )


def _ask_human(call: Call, code: ReasonCode, message: str | None) -> ToolResult | None:
    """A check asked for a human: the confirm stage asks, once, with the check's reason."""
    if not (isinstance(code, Code) and code.asks_human):
        log.error("check of %s asked for a human with %s, not a human-gate code", call.tool, code)
        return reject(call, Code.INTERNAL_ERROR, _INTERNAL)
    call.needs_human, call.human_message = code, message
    return None


def refuse_undeclared(call: Call, env: Env, code: ReasonCode) -> ToolResult | None:
    """INTERNAL_ERROR naming ``code`` when a check or handler answers with a domain code the
    guard was never told about (``ToolSpec.codes``, ``Guard(codes=...)``); None when it is known.

    A code must be declared to be listed by ``callgate codes``, counted by the dashboards and
    documented for the model's host: one that slips past would be an outcome nobody can look up.
    A code of the same spelling with other properties is undeclared too."""
    known = env.registry.codes.get(str(code))
    if known is code or (
        isinstance(known, DomainCode)
        and isinstance(code, DomainCode)
        and (known.stage, known.fixable, known.phrase, known.advice)
        == (code.stage, code.fixable, code.phrase, code.advice)
    ):
        return None
    assert call.spec is not None
    log.error("tool %s answered with undeclared code %s", call.spec.name, code)
    return reject(
        call,
        Code.INTERNAL_ERROR,
        f"Something went wrong on our side: the tool answered with code {code}, which it never "
        "declared. Do not retry; tell the user and offer a human agent.",
        data={"undeclared_code": str(code)},
    )


def remember(call: Call, env: Env, now: float) -> None:
    """After a success of a tool in ``registry.kept``: that it ran, and the values of its result
    that ``SeenIn`` prerequisites ask for (the record itself is marked by the execute stage).
    Marks this guard wrote moments ago are not written again (``guard.stages.marks``)."""
    spec, registry, ttl = call.spec, env.registry, env.policy.session_ttl
    assert spec is not None
    sid, name, counters, marks = call.session_id, spec.name, env.counters, env.marks
    if name in registry.runs_kept:
        marks.mark(counters, sid, ran_key(sid, name), ("",), now=now, ttl=ttl)
    for path in registry.results_kept.get(name, ()):
        prefix = value_key(sid, name, path, "")  # the layout, built once per path
        marks.mark(counters, sid, prefix, values_at(call.result_data, path), now=now, ttl=ttl)


def values_at(data: Any, path: str) -> set[str]:
    """The scalars at ``path`` (dots between keys, ``*`` for every item) as ``value_key`` spells
    them. One level at a time in comprehensions, not a recursive generator: a 40-variant product
    walks in a few microseconds."""
    level = [data]
    for step in path.split("."):
        if step == "*":
            level = [
                item
                for node in level
                if isinstance(node, dict | list)
                for item in (node.values() if isinstance(node, dict) else node)
            ]
        else:
            level = [node[step] for node in level if isinstance(node, dict) and step in node]
    texts = {value for value in level if value.__class__ is str}  # ids: nearly always plain str
    if len(texts) < len(level):  # repeats, numbers, str subclasses: the general rule
        texts.update(_text(v) for v in level if isinstance(v, str | int | float | bool))
    return texts


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _got(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def _either(tools: tuple[str, ...]) -> str:
    return tools[0] if len(tools) == 1 else ", ".join(tools[:-1]) + " or " + tools[-1]


_INTERNAL = "Something went wrong on our side. Do not retry; tell the user and offer a human agent."
