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
from typing import TYPE_CHECKING, Any, Generic, TypeAlias

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from typing_extensions import TypeVar

from guard.codes import DomainCode, ReasonCode, code_table
from guard.errors import ConfigurationError
from guard.patterns import ambiguous_constructs, schema_patterns
from guard.refusals import check_refusals
from guard.requirements import AnyOf, Prerequisite, Requirement, SeenIn, flat_requirements
from guard.result import Advisory, Outcome
from guard.session import Principal
from guard.views import ResultView

if TYPE_CHECKING:
    from guard.provenance import Provenance

__all__ = [
    "AnyOf",
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
    human: tuple[ReasonCode, str | None] | None = None
    """Set by ``ask_human``: the reason code and message the call waits for a human with."""
    lookup: Callable[[object], Provenance] | None = None
    """Set by the guard when it keeps provenance (``Policy.record_provenance``, or an
    argument-level ``taint_mode`` with tools that declare sinks)."""
    approval_id: str | None = None
    """Set when the checks run again on a call a human approved: the proposal already passed
    them once, so a check that counts (a rate window) must not count it a second time."""

    def warn(self, code: ReasonCode, message: str | None = None) -> None:
        """Let the call through with a warning: the model reads it with the result, spans count it."""
        self.warnings.append(Advisory(code=code, message=message or f"{code.phrase} {code.advice}"))

    def ask_human(self, code: ReasonCode | None = None, message: str | None = None) -> None:
        """Let the call run only after a human approves it, with ``code`` (one of
        ``guard.codes.HUMAN_GATES``; ``UNTRUSTED_VALUE`` by default) as the reason. The first
        request of a call counts; a call a human approved does not ask again."""
        if self.human is None:
            from guard.codes import Code

            self.human = (Code.UNTRUSTED_VALUE if code is None else code, message)

    def provenance(self, value: object) -> Provenance:
        """Where ``value`` (an exact value, or a token such as an e-mail address, IBAN, URL or id)
        came from in this session: the first trusted and untrusted results that had it.

        Raises ``ConfigurationError`` when the guard keeps no provenance (set
        ``Policy.record_provenance`` or an argument-level ``taint_mode``)."""
        if self.lookup is None:
            raise ConfigurationError(
                "this guard keeps no provenance: set Policy(record_provenance=True)"
            )
        return self.lookup(value)


Handler: TypeAlias = Callable[[Any, ToolContext], Any | Awaitable[Any]]
"""Runs the tool: ``(validated arguments, ToolContext) -> result`` (sync or async)."""

Reconcile: TypeAlias = Callable[[Any, ToolContext], Outcome]
"""Asks the backend whether a write whose outcome is unknown took effect:
``(validated arguments, ToolContext) -> Outcome`` (``ctx.idempotency_key`` is the key every
attempt was sent with). ``APPLIED`` or ``NOT_APPLIED`` settle it; ``UNKNOWN`` leaves it unknown."""

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
    sinks: tuple[str, ...] | None = None
    """Arguments that say where an effect lands or data goes (a recipient, an account, a URL, an
    amount, a file to delete): argument-level taint checks their values' provenance. Also marked
    with ``Field(json_schema_extra={"sink": True})``. ``()`` declares that the tool has none;
    a tool that declares neither is gated session-wide in every taint mode."""
    egress: bool = False
    """A read that sends data outward (fetch a URL, post to a webhook): gated after untrusted
    output like a write."""
    refusals: Mapping[type[Exception], ReasonCode] = field(default_factory=dict, compare=False)
    """The tool library's own exceptions and the codes they mean (``{OrderNotFound:
    Code.NOT_FOUND}``): raised by the handler or the check, they are refusals with that code, as
    ``RuleViolation`` is; the guard's ``refusals=`` apply to every tool, these win."""
    risk_by: Callable[[Any, CheckContext], Risk] | None = None
    """The risk of this call from its validated arguments (an amount above a threshold, a
    recipient outside the principal's own accounts); ``risk`` when absent. A write at or above
    ``Policy.confirm_at`` waits for a human."""
    timeout: float | None = 10.0
    """Seconds per attempt."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How transient failures are retried."""
    idempotent_backend: bool = True
    """The backend deduplicates by idempotency key, so a write with an unknown outcome may be retried."""
    reconcile: Reconcile | None = None
    """A status check for writes: when a repeat finds this call's earlier outcome unknown (a
    timeout, a process that died mid-write), the guard asks it before answering, and records the
    settled outcome for every later repeat (see ``Reconcile``)."""
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
        for any_of in requires:
            if isinstance(any_of, AnyOf) and not any_of.options:
                raise ConfigurationError(f"tool {self.name!r}: AnyOf names no requirement")
        for need in flat_requirements(requires):
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
        check_refusals(self.refusals, f"tool {self.name!r}")
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
        marked = tuple(
            name
            for name, info in self.arguments.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("sink")
        )
        sinks = tuple(dict.fromkeys((*(self.sinks or ()), *marked)))
        for name in sinks:
            if name not in self.arguments.model_fields:
                raise ConfigurationError(f"tool {self.name!r}: sink {name!r} is not an argument")
        object.__setattr__(self, "sink_fields", sinks)
        object.__setattr__(self, "declares_sinks", self.sinks is not None or bool(marked))
        if self.egress and self.effect is Effect.WRITE:
            raise ConfigurationError(
                f"tool {self.name!r}: egress is for reads; a write is gated as a write already"
            )
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
    sink_fields: tuple[str, ...] = field(init=False, default=())
    """Every sink argument: ``sinks`` and the fields marked ``"sink"`` (derived)."""
    declares_sinks: bool = field(init=False, default=False)
    """The tool says which arguments are sinks (possibly none), so argument-level taint applies
    (derived)."""

    @property
    def gated_by_taint(self) -> bool:
        """Untrusted output in the session can make this tool wait: a write or an egress read."""
        return self.is_write or self.egress

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
            for need in flat_requirements(spec.requirements):
                for name in need.tools:
                    other = specs.get(name)
                    if other is None:
                        raise ConfigurationError(
                            f"tool {spec.name!r} requires unknown tool {name!r}"
                        )
                    if isinstance(need, SeenIn):
                        kept.setdefault(name, set()).update(need.paths)
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
        mapped = (c for spec in specs.values() for c in spec.refusals.values())
        self.codes: dict[str, ReasonCode] = code_table(
            [
                *codes,
                *(code for spec in specs.values() for code in spec.codes),
                *(code for code in mapped if isinstance(code, DomainCode)),
            ]
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
