"""Tool declarations: one pydantic model per tool is the single source of truth.

The same argument model yields the JSON schema the model sees (see ``guard.providers``) and the strict
validation the runtime enforces, so the two can never drift apart.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, Generic, TypeAlias

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from guard.codes import DomainCode, ReasonCode, code_table
from guard.errors import ConfigurationError
from guard.patterns import ambiguous_constructs, schema_patterns
from guard.result import Advisory
from guard.session import Principal
from guard.views import ResultView

__all__ = [
    "Authenticator",
    "CheckContext",
    "Effect",
    "Handler",
    "Prerequisite",
    "Requirement",
    "RetryPolicy",
    "Risk",
    "SeenIn",
    "ToolContext",
    "ToolRegistry",
    "ToolSpec",
    "tool",
]

DepsT = TypeVar("DepsT", default=Any)
"""The type of the host's dependencies object (``Guard(deps=...)``)."""


class Effect(StrEnum):
    """Whether a tool changes the world. Writes get idempotency, confirmation and aggregate limits."""

    READ = "read"
    WRITE = "write"


class Risk(IntEnum):
    """How bad a wrong call is. Calls at or above the policy's ``confirm_at`` need a human."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter, on transient failures only."""

    attempts: int = 3
    """Total attempts, the first included."""
    base_delay: float = 0.05
    """Seconds before the second attempt; doubled each time."""
    max_delay: float = 1.0
    """Cap on one backoff delay."""
    jitter: bool = True
    """Draw each delay uniformly from [0, delay] so a fleet does not retry in lockstep."""


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
    path: str
    """Where in that tool's result the values are: ``items.*.item_id``."""

    @property
    def tools(self) -> tuple[str, ...]:
        """The tools whose results count."""
        return (self.tool,) if isinstance(self.tool, str) else tuple(self.tool)


Requirement: TypeAlias = Prerequisite | SeenIn
"""What must have happened earlier in the session before a tool may run."""


@dataclass(kw_only=True, slots=True)
class ToolContext(Generic[DepsT]):
    """What a handler knows about the call besides its arguments. Authority comes from here.

    Built for every attempt, so not ``frozen`` (three times the cost); handlers only read it.
    Annotate it with the host's dependency type: ``ctx: ToolContext[RetailDeps]``."""

    principal: Principal
    """Who the session acts for."""
    session_id: str
    """The conversation."""
    call_id: str | None
    """The model's id for the call."""
    idempotency_key: str | None
    """Send this to the backend with every attempt of a write."""
    attempt: int
    """1 for the first attempt."""
    timeout: float | None
    """Seconds the handler may take; pass it on to its I/O."""
    approval_id: str | None = None
    """The human approval this call runs under, if any."""
    deps: DepsT = None  # type: ignore[assignment]
    """The host's dependencies (``Guard(deps=...)``): backend clients, repositories, settings."""


@dataclass(kw_only=True, slots=True)
class CheckContext(Generic[DepsT]):
    """What a business check knows: who asks, the host's dependencies, nothing the model could forge.

    Annotate it with the host's dependency type: ``ctx: CheckContext[RetailDeps]``."""

    principal: Principal
    """Who the session acts for."""
    session_id: str
    """The conversation."""
    deps: DepsT = None  # type: ignore[assignment]
    """The host's dependencies (``Guard(deps=...)``): backend clients, repositories, settings."""
    warnings: list[Advisory] = field(default_factory=list)
    """Warnings raised so far with ``warn``."""

    def warn(self, code: ReasonCode, message: str | None = None) -> None:
        """Let the call through with a warning: the model reads it with the result, spans count it."""
        self.warnings.append(Advisory(code=code, message=message or f"{code.phrase} {code.advice}"))


Handler: TypeAlias = Callable[[Any, ToolContext], Any | Awaitable[Any]]
"""Runs the tool: ``(validated arguments, ToolContext) -> result`` (sync or async)."""

Check: TypeAlias = Callable[[Any, CheckContext], None]
"""Checks arguments against current state; raises ``RuleViolation`` to refuse, calls
``ctx.warn`` to let the call through with a warning."""

Authenticator: TypeAlias = Callable[[Any, Principal], Principal | None]
"""For an authenticating tool: ``(the result the model saw, the session's principal) -> the
principal it identified`` (None: nobody was identified, the session stays as it is)."""


@dataclass(frozen=True, kw_only=True)
class ToolSpec:
    """Everything the guard needs to know about one tool."""

    name: str
    """The name the model calls (``refund_order``); versioned tools get their own (``refund_order_v2``)."""
    description: str
    """For the model: what the tool does, when to use it and when not."""
    arguments: type[BaseModel]
    """Argument model. Must forbid extra fields; validated strictly."""
    handler: Handler
    """The function that does the work."""
    effect: Effect = Effect.READ
    """Read or write."""
    risk: Risk = Risk.LOW
    """How much harm a wrong call does."""
    scope: str | None = None
    """The scope a session needs (``refunds:write``); None for none."""
    check: Check | None = None
    """Business rules against current state, run before confirmation and again after approval."""
    prerequisite: Prerequisite | None = None
    """A tool that must have succeeded earlier in the session for the same record."""
    requires: tuple[Requirement, ...] = ()
    """More prerequisites, checked in order after ``prerequisite``: ``Prerequisite`` (any one of
    several tools, for a record or at all) and ``SeenIn`` (a value from an earlier result)."""
    codes: tuple[DomainCode, ...] = ()
    """The deployment's own codes this tool's check and handler may answer with (listed by
    ``callgate codes``; validated when the guard is built)."""
    authenticates: Authenticator | None = None
    """This tool identifies the user: on success, the principal it returns is bound to the session."""
    record_field: str | None = None
    """The argument that names the record this tool touches; lets other tools require it first."""
    result_model: type[BaseModel] | None = None
    """The fields the model may see; everything else the handler returns is dropped."""
    untrusted_output: bool = False
    """The result carries outside text (web pages, e-mails): the session is tainted after it runs."""
    timeout: float | None = 10.0
    """Seconds per attempt."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How transient failures are retried."""
    idempotent_backend: bool = True
    """The backend deduplicates by idempotency key, so a write with an unknown outcome may be retried."""
    idempotency_field: str | None = None
    """An argument carrying a caller-chosen request id (as payment APIs take): the key derives from
    it instead of from all arguments, and the same id with other arguments is IDEMPOTENCY_CONFLICT."""
    version: str = "1"
    """The contract's version; bump it (or add a ``_v2`` tool) when the arguments change."""
    sensitive_fields: frozenset[str] = frozenset()
    """Argument names whose values never leave the process unmasked."""
    constraints: tuple[str, ...] = ()
    """Rules across fields, in words, for the model's description (``model_description``). The
    docstrings of the argument model's ``model_validator``s are added: write the rule once."""

    def __post_init__(self) -> None:
        if self.arguments.model_config.get("extra") != "forbid":
            raise ConfigurationError(
                f"tool {self.name!r}: argument model {self.arguments.__name__} must set extra='forbid'"
            )
        requires = ((self.prerequisite,) if self.prerequisite else ()) + tuple(self.requires)
        for need in requires:
            if need.field is not None and need.field not in self.arguments.model_fields:
                raise ConfigurationError(
                    f"tool {self.name!r}: prerequisite field {need.field!r} is not an argument"
                )
            if not need.tools:
                raise ConfigurationError(f"tool {self.name!r}: a prerequisite names no tool")
        object.__setattr__(self, "requirements", requires)
        for code in self.codes:
            if not isinstance(code, DomainCode):
                raise ConfigurationError(f"tool {self.name!r}: {code!r} is not a DomainCode")
        if self.record_field and self.record_field not in self.arguments.model_fields:
            raise ConfigurationError(
                f"tool {self.name!r}: record_field {self.record_field!r} is not an argument"
            )
        if self.idempotency_field and self.idempotency_field not in self.arguments.model_fields:
            raise ConfigurationError(
                f"tool {self.name!r}: idempotency_field {self.idempotency_field!r} is not an argument"
            )
        if self.retry.attempts < 1:
            raise ConfigurationError(f"tool {self.name!r}: retry.attempts must be at least 1")
        sensitive = frozenset(
            name
            for name, info in self.arguments.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("sensitive")
        )
        object.__setattr__(self, "sensitive_fields", self.sensitive_fields | sensitive)
        object.__setattr__(self, "constraints", self.constraints + _validator_rules(self.arguments))
        # pydantic's validator and serializer called directly: half the cost of model_validate and
        # model_dump_json, which matters on a path every call takes.
        object.__setattr__(self, "_validator", self.arguments.__pydantic_validator__)
        object.__setattr__(self, "_serializer", self.arguments.__pydantic_serializer__)
        if self.result_model is not None:  # validated straight into dicts where it can be
            object.__setattr__(self, "_result_view", ResultView(self.result_model))
        # A result model with from_attributes reads the handler's objects (ORM rows) itself.
        reads_attributes = bool(
            self.result_model and self.result_model.model_config.get("from_attributes")
        )
        object.__setattr__(self, "_reads_attributes", reads_attributes)
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.handler))
        object.__setattr__(self, "is_write", self.effect is Effect.WRITE)
        object.__setattr__(self, "_schema", self.arguments.model_json_schema())
        for where, regex in schema_patterns(self._schema):  # type: ignore[attr-defined]
            if found := ambiguous_constructs(regex):
                raise ConfigurationError(
                    f"tool {self.name!r}: pattern {regex!r} at {where} means one thing to the "
                    f"validator and another in the published schema: {'; '.join(found)}"
                )

    requirements: tuple[Requirement, ...] = field(init=False, default=())
    """Every prerequisite, ``prerequisite`` first (derived)."""
    is_write: bool = field(init=False, default=False)
    """The tool changes the world (derived from ``effect``)."""
    is_async: bool = field(init=False, default=False)
    """The handler is a coroutine function (derived)."""

    def validate(self, data: Any) -> BaseModel:
        """Strict validation of decoded JSON into the argument model; raises ``ValidationError``."""
        model: BaseModel = self._validator.validate_python(data, strict=True)  # type: ignore[attr-defined]
        return model

    def validate_json(self, text: str) -> BaseModel:
        """Strict validation of JSON text: what JSON spells one way only (an array for a tuple, ISO
        text for a date) is accepted, nothing is coerced; raises ``ValidationError``."""
        model: BaseModel = self._validator.validate_json(text, strict=True)  # type: ignore[attr-defined]
        return model

    @property
    def model_description(self) -> str:
        """The description the model sees: ``description``, then the rules across fields."""
        if not self.constraints:
            return self.description
        rules = "\n".join(f"- {rule}" for rule in self.constraints)
        return f"{self.description}\n\nRules across fields (checked before anything runs):\n{rules}"

    def canonical(self, arguments: BaseModel) -> str:
        """Compact JSON in declaration order: equal calls give equal text, however they were sent."""
        text: bytes = self._serializer.to_json(arguments)  # type: ignore[attr-defined]
        return text.decode()

    def visible(self, output: Any) -> dict[str, Any] | None:
        """What the model may see of a handler's output: the result model's fields, nothing else.

        Every shape pydantic can dump (models, dataclasses, lists, tuples, sets, dicts holding
        them, dates, enums, decimals, UUIDs) is converted to JSON values once, here, so storing,
        replaying, scanning and rendering the result all see plain JSON. Raises pydantic's
        ``ValidationError`` when the output does not fit the result model, and
        ``PydanticSerializationError`` or ``ValueError`` when it is not JSON-able at all."""
        if isinstance(output, BaseModel):
            output = output.model_dump(mode="json")
        if self.result_model is None:
            output = to_jsonable_python(output, inf_nan_mode="null")
            if output is None or isinstance(output, dict):
                return output
            return {"value": output}
        view = self._result_view  # type: ignore[attr-defined]
        try:  # as given first: the fields it drops may hold anything (a client, a raw response)
            data: dict[str, Any] = view(output)
        except ValidationError:
            if self._reads_attributes:  # type: ignore[attr-defined]
                raise
            data = view(to_jsonable_python(output, inf_nan_mode="null"))
        return data

    @property
    def json_schema(self) -> dict[str, Any]:
        """The argument model's JSON schema (pydantic's draft 2020-12 rendering)."""
        schema: dict[str, Any] = getattr(self, "_schema")  # noqa: B009
        return schema

    @property
    def schema_hash(self) -> str:
        """Short hash of name, version and argument schema: tells which contract a span was made under."""
        cached: str | None = getattr(self, "_schema_hash", None)
        if cached is None:
            canonical = json.dumps(
                {"name": self.name, "version": self.version, "schema": self.json_schema},
                sort_keys=True,
                separators=(",", ":"),
            )
            cached = hashlib.sha256(canonical.encode()).hexdigest()[:12]
            object.__setattr__(self, "_schema_hash", cached)
        return cached


def _validator_rules(model: type[BaseModel]) -> tuple[str, ...]:
    """The first docstring line of each model validator: the cross-field rules, in words."""
    validators = model.__pydantic_decorators__.model_validators.values()
    lines = (inspect.getdoc(decorator.func) or "" for decorator in validators)
    return tuple(doc.splitlines()[0] for doc in lines if doc)


def tool(
    *,
    arguments: type[BaseModel],
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Callable[[Handler], ToolSpec]:
    """Declare a tool from its handler: the name defaults to the function's, the description to its docstring.

    ::

        @tool(arguments=GetOrder, scope="orders:read", result_model=OrderView)
        def get_order(args: GetOrder, ctx: ToolContext) -> dict[str, Any]:
            \"\"\"Look up one order. Use before any refund.\"\"\"
    """

    def decorate(handler: Handler) -> ToolSpec:
        doc = description or inspect.cleandoc(handler.__doc__ or "")
        if not doc:
            raise ConfigurationError(f"tool {name or handler.__name__!r} needs a description")
        return ToolSpec(
            name=name or handler.__name__,
            description=doc,
            arguments=arguments,
            handler=handler,
            **options,
        )

    return decorate


class ToolRegistry(Mapping[str, ToolSpec]):
    """The tools a guard knows, by name. Immutable once built."""

    def __init__(self, tools: Iterable[ToolSpec], *, codes: Iterable[DomainCode] = ()) -> None:
        specs: dict[str, ToolSpec] = {}
        for spec in tools:
            if spec.name in specs:
                raise ConfigurationError(f"tool {spec.name!r} is declared twice")
            specs[spec.name] = spec
        self.runs_kept: frozenset[str] = frozenset()
        """Tools whose every success is remembered (a prerequisite without a record names them)."""
        self.results_kept: dict[str, tuple[str, ...]] = {}
        """Per tool, the result paths whose values are remembered (``SeenIn`` names them)."""
        runs: set[str] = set()
        kept: dict[str, set[str]] = {}
        for spec in specs.values():
            for need in spec.requirements:
                for name in need.tools:
                    other = specs.get(name)
                    if other is None:
                        raise ConfigurationError(
                            f"tool {spec.name!r} requires unknown tool {name!r}"
                        )
                    if isinstance(need, SeenIn):
                        kept.setdefault(name, set()).add(need.path)
                    elif need.field is None:
                        runs.add(name)
                    elif other.record_field is None:
                        raise ConfigurationError(
                            f"tool {spec.name!r} requires {name!r} for a record, but {name!r} "
                            "declares no record_field"
                        )
        self.runs_kept = frozenset(runs)
        self.results_kept = {name: tuple(sorted(paths)) for name, paths in kept.items()}
        self.kept: frozenset[str] = self.runs_kept | frozenset(self.results_kept)
        """Tools whose successes ``remember`` records (beyond their record)."""
        self.codes: dict[str, ReasonCode] = code_table(
            [*codes, *(code for spec in specs.values() for code in spec.codes)]
        )
        """Every code a call can end with, by spelling: the core codes, then the domain's."""
        self.authenticating: tuple[str, ...] = tuple(
            name for name, spec in specs.items() if spec.authenticates is not None
        )
        """The tools that identify the user, in declaration order."""
        self._specs = specs

    def __getitem__(self, name: str) -> ToolSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def get(
        self, name: str, default: Any = None
    ) -> Any:  # fast path, skips Mapping.get's try/except
        return self._specs.get(name, default)
