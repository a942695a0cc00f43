"""A refusal keeps its own verdict wherever it is raised; a code nobody declared never passes.

``RuleViolation(code, fixable=...)`` means the same from a business check and from a handler
(the backend refusing): code, message, problems and the fixable override all reach the model.
A check, a handler or a warning answering with a domain code the guard was never told about
(or a code spelled like a declared one with other properties) ends INTERNAL_ERROR naming it,
with nothing written, so ``callgate codes`` lists every code a call can end with. The shop's and
the retail example's sources are scanned for the codes they raise: all are declared.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from callgate.codes import code_rows
from guard import (
    CheckContext,
    Code,
    DomainCode,
    Effect,
    Guard,
    Policy,
    Principal,
    Problem,
    RolePolicy,
    RuleViolation,
    ToolContext,
    tool,
)
from guard.shop import build_shop
from guard.testing import ManualClock

ROOT = Path(__file__).resolve().parents[2]
USER = Principal(id="U-1", role="user")
ARGS = '{"text": "a"}'


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


def domain_code(name: str = "NOTE_TOO_LONG", *, fixable: bool = True, **kw: Any) -> DomainCode:
    return DomainCode(
        name,
        stage=kw.get("stage", "rules"),
        fixable=fixable,
        phrase=kw.get("phrase", "The note is too long."),
        advice=kw.get("advice", "Send a shorter note."),
    )


def refusing_guard(
    where: str,
    violation: RuleViolation | None,
    *,
    declared: tuple[DomainCode, ...] = (),
    guard_codes: tuple[DomainCode, ...] = (),
    warn: DomainCode | None = None,
) -> tuple[Guard, list[str]]:
    """A write whose check (``where="check"``) or handler (``"handler"``) raises ``violation``."""
    effects: list[str] = []

    def check(args: Note, ctx: CheckContext) -> None:
        if warn is not None:
            ctx.warn(warn)
        if where == "check" and violation is not None:
            raise violation

    @tool(arguments=Note, effect=Effect.WRITE, check=check, codes=declared)
    def save(args: Note, ctx: ToolContext) -> dict[str, str]:
        """Save a note."""
        if where == "handler" and violation is not None:
            raise violation
        effects.append(args.text)
        return {"saved": args.text}

    policy = Policy(roles={"user": RolePolicy(tools=frozenset({"save"}))}, rate_limit=None)
    guard = Guard(tools=[save], policy=policy, clock=ManualClock(), codes=guard_codes)
    return guard, effects


SPELLINGS = st.from_regex(r"[A-Z][A-Z0-9]{0,10}(_[A-Z0-9]{1,6}){0,3}", fullmatch=True).filter(
    lambda name: name not in Code.__members__
)


class TestVerdicts:
    @pytest.mark.parametrize("where", ["check", "handler"])
    @settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(code_fixable=st.booleans(), override=st.none() | st.booleans(), name=SPELLINGS)
    def test_a_refusal_keeps_its_verdict_wherever_it_is_raised(
        self, where: str, code_fixable: bool, override: bool | None, name: str
    ) -> None:
        """Code, message, problems and the fixable override are the same from a check and
        from a handler; nothing is written."""
        code = domain_code(
            name, fixable=code_fixable, stage="rules" if where == "check" else "execute"
        )
        problem = Problem(path="/text", rule="too_long", expected="at most 3 characters", got='"a"')
        violation = RuleViolation(code, "Too long.", fixable=override, problems=[problem])
        guard, effects = refusing_guard(where, violation, declared=(code,))
        result = guard.session("s1", USER).execute("save", ARGS)
        assert (result.code, result.message) == (code, "Too long.")
        assert result.fixable is (code_fixable if override is None else override)
        assert result.data is not None and result.data["problems"][0]["path"] == "/text"
        assert result.outcome == "not_applied" and effects == []

    def test_the_issue_case_a_handler_refusal_that_is_not_fixable(self) -> None:
        """``RuleViolation(CODE, fixable=False)`` from a handler, CODE fixable: not fixable."""
        code = domain_code(stage="execute")
        guard, _ = refusing_guard("handler", RuleViolation(code, fixable=False), declared=(code,))
        assert guard.session("s1", USER).execute("save", ARGS).fixable is False


class TestUndeclaredCodes:
    @pytest.mark.parametrize("where", ["check", "handler"])
    @settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(name=SPELLINGS)
    def test_an_undeclared_code_is_an_internal_error_naming_it(self, where: str, name: str) -> None:
        """Raised but never declared: INTERNAL_ERROR, the code named, nothing written, and a
        later proposal is free to run once the tool stops raising it (the claim was released)."""
        code = domain_code(name)
        guard, effects = refusing_guard(where, RuleViolation(code))
        result = guard.session("s1", USER).execute("save", ARGS)
        assert result.code == "INTERNAL_ERROR" and name in result.message
        assert result.data == {"undeclared_code": name}
        assert result.outcome == "not_applied" and effects == []
        assert name not in {row["code"] for row in code_rows(guard)}

    def test_a_warning_with_an_undeclared_code_is_refused(self) -> None:
        """``ctx.warn`` with a code nobody declared: INTERNAL_ERROR naming it, nothing written."""
        guard, effects = refusing_guard("check", None, warn=domain_code("ODD_NOTE"))
        result = guard.session("s1", USER).execute("save", ARGS)
        assert result.code == "INTERNAL_ERROR" and "ODD_NOTE" in result.message
        assert effects == []

    @pytest.mark.parametrize(
        "impostor",
        [
            {"fixable": False},
            {"phrase": "Another meaning."},
            {"advice": "Do something else."},
            {"stage": "execute"},
        ],
    )
    def test_a_code_spelled_like_a_declared_one_is_undeclared(
        self, impostor: dict[str, Any]
    ) -> None:
        """The same spelling with other properties is not the declared code."""
        declared = domain_code()
        guard, effects = refusing_guard(
            "check", RuleViolation(domain_code(**impostor)), declared=(declared,)
        )
        result = guard.session("s1", USER).execute("save", ARGS)
        assert result.code == "INTERNAL_ERROR" and "NOTE_TOO_LONG" in result.message
        assert effects == []

    @pytest.mark.parametrize("where", ["check", "handler"])
    def test_codes_declared_on_the_guard_or_equal_copies_pass(self, where: str) -> None:
        """Declared through ``Guard(codes=...)``, or an equal copy of a declared code: answered."""
        guard, _ = refusing_guard(where, RuleViolation(domain_code()), guard_codes=(domain_code(),))
        assert guard.session("s1", USER).execute("save", ARGS).code == "NOTE_TOO_LONG"

    def test_core_codes_are_always_declared(self) -> None:
        """A core code raised from a handler needs no declaration."""
        guard, _ = refusing_guard("handler", RuleViolation(Code.NOT_FOUND, "No such note."))
        assert guard.session("s1", USER).execute("save", ARGS).code == "NOT_FOUND"


def raised_codes(package: str) -> set[DomainCode]:
    """Every DomainCode a module of ``package`` raises or warns with, found in its source:
    the first argument of each ``RuleViolation(...)`` and ``.warn(...)``, resolved by name."""
    found: set[DomainCode] = set()
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        module = importlib.import_module(info.name)
        tree = ast.parse(Path(module.__file__ or "").read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called not in ("RuleViolation", "warn"):
                continue
            first = node.args[0]
            name = first.id if isinstance(first, ast.Name) else None
            value = getattr(module, name, None) if name else None
            if isinstance(value, DomainCode):
                found.add(value)
            else:  # a core code (Code.X) or something the scan cannot resolve
                assert isinstance(first, ast.Attribute) and ast.unparse(first).startswith(
                    "Code."
                ), f"{info.name}: cannot tell which code {ast.unparse(first)} is"
    return found


def defined_codes(package: str) -> set[DomainCode]:
    """Every DomainCode defined at module level in ``package``."""
    root = importlib.import_module(package)
    return {
        value
        for info in pkgutil.walk_packages(root.__path__, package + ".")
        for value in vars(importlib.import_module(info.name)).values()
        if isinstance(value, DomainCode)
    }


class TestDeclaredListIsComplete:
    @pytest.mark.parametrize("package", ["guard.shop", "examples.retail"])
    def test_every_code_raised_or_defined_is_listed(self, package: str) -> None:
        """What ``callgate codes`` lists for the shop and the retail example covers every code
        their checks and handlers raise or warn with, and every code they define."""
        if package == "guard.shop":
            guard = build_shop(clock=ManualClock()).guard
        else:
            from examples.retail import build_retail

            guard = build_retail(clock=ManualClock()).guard
        listed = {row["code"]: row for row in code_rows(guard) if row["origin"] == "domain"}
        needed = raised_codes(package) | defined_codes(package)
        assert needed and {str(code) for code in needed} == set(listed)
        for code in needed:
            row = listed[str(code)]
            assert (row["stage"], row["fixable"], row["phrase"]) == (
                code.stage,
                code.fixable,
                code.phrase,
            )
        assert json.dumps(list(listed.values()))
