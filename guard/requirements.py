"""What must have happened earlier in a session before a tool may run: ``Prerequisite`` (a tool
ran, for a record or at all), ``SeenIn`` (a value came from an earlier result), and ``AnyOf``
(either-or across them). Declared on a tool (``requires=``); checked by the rules stage."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeAlias

__all__ = ["AnyOf", "Prerequisite", "Requirement", "SeenIn", "flat_requirements"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Prerequisite:
    """Another tool (any one of several) must have succeeded earlier in the session.

    ``Prerequisite(tool="get_order", field="order_id")``: ``get_order`` ran for the order this call
    names. The record is matched by value: this tool's ``field`` against the required tool's
    ``record_field``, so the names may differ (``order_id`` here, ``id`` there). Without ``field``
    the required tool must simply have succeeded (``tool=("find_user_by_email", "find_user_by_zip")``).
    """

    tool: str | tuple[str, ...]
    """The tool that must have run, or several of which any one will do."""
    field: str | None = None
    """This tool's argument naming the record; None: any successful call of the tool counts."""

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools any one of which satisfies the prerequisite."""
        return (self.tool,) if isinstance(self.tool, str) else tuple(self.tool)


@dataclass(frozen=True, kw_only=True, slots=True)
class SeenIn:
    """An argument's value must have appeared in an earlier result in this session.

    ``SeenIn(field="payment_method_id", tool="get_user_details", path="payment_methods.*.id")``: the
    payment method must be one the user's profile listed. ``path`` walks the result the model saw
    (dots between keys, ``*`` for every item of a list). A list argument has each item checked.
    """

    field: str
    """This tool's argument (a scalar, or a list of scalars)."""
    tool: str | tuple[str, ...]
    """The tool (or any of several) whose results count."""
    path: str | tuple[str, ...]
    """Where in that tool's result the values are: ``items.*.item_id``; or several places, any of
    which counts (``("items.*.item_id", "exchanges.*.new_item_id")``)."""

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools whose results count."""
        return (self.tool,) if isinstance(self.tool, str) else tuple(self.tool)

    @property
    def paths(self) -> tuple[str, ...]:
        """The places in those results whose values count."""
        return (self.path,) if isinstance(self.path, str) else tuple(self.path)


@dataclass(frozen=True, kw_only=True, slots=True)
class AnyOf:
    """Either-or across requirements: any one of ``options`` satisfied is enough.

    ``AnyOf(options=(SeenIn(field="payment_method_id", tool="get_user_details",
    path="payment_methods.*.id"), Prerequisite(tool="add_payment_method")))``: a method the
    profile listed, or one the user just added. When none holds, the model is told each way."""

    options: tuple[Prerequisite | SeenIn, ...]
    """The requirements, any one of which will do (in the order the model is told them)."""

    @property
    def field(self) -> str | None:
        """None: the options name their own fields."""
        return None

    @property
    def tools(self) -> tuple[str, ...]:
        """Every tool any option names."""
        return tuple(dict.fromkeys(t for option in self.options for t in option.tools))


Requirement: TypeAlias = Prerequisite | SeenIn | AnyOf
"""What must have happened earlier in the session before a tool may run."""


def flat_requirements(requires: Iterable[Requirement]) -> Iterator[Prerequisite | SeenIn]:
    """Every requirement, those inside ``AnyOf`` included."""
    for need in requires:
        if isinstance(need, AnyOf):
            yield from need.options
        else:
            yield need
