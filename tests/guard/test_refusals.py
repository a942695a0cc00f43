"""A tool library's own exceptions as refusals (guard.refusals), and deps per session."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from guard import (
    CheckContext,
    Code,
    ConfigurationError,
    DomainCode,
    Effect,
    Guard,
    Policy,
    Principal,
    RolePolicy,
    ToolContext,
    tool,
)


class LibraryError(Exception):
    """The backend library's base error."""


class OrderMissing(LibraryError):
    """The library's not-found."""


class Frozen(LibraryError):
    """The library's account-frozen."""


ACCOUNT_FROZEN = DomainCode(
    "ACCOUNT_FROZEN",
    stage="execute",
    fixable=False,
    phrase="The account is frozen.",
    advice="Tell the user to contact the bank.",
)


class Ref(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ref: str


def build(
    raises: Exception | None, *, in_check: bool = False, **guard: Any
) -> tuple[Guard, list[str]]:
    done: list[str] = []

    def check(args: Ref, ctx: CheckContext) -> None:
        if in_check and raises is not None:
            raise raises

    @tool(arguments=Ref, effect=Effect.WRITE, check=check, refusals={Frozen: ACCOUNT_FROZEN})
    def pay(args: Ref, ctx: ToolContext) -> dict[str, Any]:
        """Pay."""
        if raises is not None and not in_check:
            raise raises
        done.append(ctx.deps)
        return {"ok": True}

    policy = Policy(roles={"u": RolePolicy(tools=frozenset({"pay"}))}, rate_limit=None)
    return Guard(tools=[pay], policy=policy, **guard), done


ARGS = json.dumps({"ref": "r1"})
USER = Principal(id="U", role="u")


class TestRefusals:
    @pytest.mark.parametrize("in_check", [False, True])
    def test_guard_wide_mapping(self, in_check: bool) -> None:
        """OrderMissing from a handler or a check is NOT_FOUND; its text never reaches the model."""
        guard, done = build(
            OrderMissing("row 77 missing in db shard-3"),
            in_check=in_check,
            refusals={OrderMissing: Code.NOT_FOUND},
        )
        result = guard.session("s", USER).execute("pay", ARGS)
        assert result.code == Code.NOT_FOUND and not result.ok
        assert "shard-3" not in result.message and done == []

    def test_tool_mapping_wins_and_declares_its_code(self) -> None:
        """The tool's Frozen -> ACCOUNT_FROZEN beats the guard's LibraryError -> UPSTREAM_REJECTED."""
        guard, _ = build(Frozen("x"), refusals={LibraryError: Code.UPSTREAM_REJECTED})
        result = guard.session("s", USER).execute("pay", ARGS)
        assert result.code == "ACCOUNT_FROZEN"
        assert "ACCOUNT_FROZEN" in guard.registry.codes

    def test_most_specific_class_of_the_guard_map(self) -> None:
        """A subclass maps through its nearest mapped base."""
        guard, _ = build(OrderMissing("x"), refusals={LibraryError: Code.UPSTREAM_REJECTED})
        assert guard.session("s", USER).execute("pay", ARGS).code == Code.UPSTREAM_REJECTED

    def test_unmapped_exceptions_stay_internal_errors(self) -> None:
        """An exception nobody mapped is a bug: INTERNAL_ERROR, as before."""
        guard, done = build(ValueError("boom"), refusals={OrderMissing: Code.NOT_FOUND})
        assert guard.session("s", USER).execute("pay", ARGS).code == Code.INTERNAL_ERROR
        assert done == []

    @pytest.mark.parametrize(
        "bad", [{OrderMissing: Code.OK}, {"OrderMissing": Code.NOT_FOUND}, {OrderMissing: "X"}]
    )
    def test_bad_maps_are_configuration_errors(self, bad: Any) -> None:
        """Keys must be exception classes, values refusal codes."""
        with pytest.raises(ConfigurationError):
            build(None, refusals=bad)


class TestDepsPerSession:
    def test_each_session_gets_its_own_deps(self) -> None:
        """Two sessions of one guard hand their own deps to the handler; none: the guard's."""
        guard, done = build(None, deps="guard-deps")
        guard.session("a", USER, deps="tenant-a").execute("pay", ARGS)
        guard.session("b", USER, deps="tenant-b").execute("pay", json.dumps({"ref": "r2"}))
        guard.session("c", USER).execute("pay", json.dumps({"ref": "r3"}))
        assert done == ["tenant-a", "tenant-b", "guard-deps"]
