"""callgate's guard: the deterministic pipeline between a model's proposed tool calls and the world."""

from guard.call import Call, Reservation, RetryRecord, StageRecord
from guard.clock import Clock, SystemClock
from guard.codes import Code, DomainCode, ReasonCode
from guard.errors import (
    ConfigurationError,
    GuardError,
    HumanRequired,
    RuleViolation,
    TransientError,
)
from guard.observe import BaseObserver, MultiObserver, NullObserver, Observer
from guard.pipeline import ApprovalNotFound, Guard, PrincipalSwitch, Session
from guard.policy import AmountLimit, Policy, RateLimit, RolePolicy, TaintMode
from guard.provenance import Provenance, ProvenanceHit, ValueSource
from guard.registry import (
    AnyOf,
    CheckContext,
    Effect,
    Prerequisite,
    Requirement,
    RetryPolicy,
    Risk,
    SeenIn,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    tool,
)
from guard.result import Advisory, Outcome, Problem, ToolResult
from guard.session import Principal

__all__ = [
    "Advisory",
    "AmountLimit",
    "AnyOf",
    "ApprovalNotFound",
    "BaseObserver",
    "Call",
    "CheckContext",
    "Clock",
    "Code",
    "ConfigurationError",
    "DomainCode",
    "Effect",
    "Guard",
    "GuardError",
    "HumanRequired",
    "MultiObserver",
    "NullObserver",
    "Observer",
    "Outcome",
    "Policy",
    "Prerequisite",
    "Principal",
    "PrincipalSwitch",
    "Problem",
    "Provenance",
    "ProvenanceHit",
    "RateLimit",
    "ReasonCode",
    "Requirement",
    "Reservation",
    "RetryPolicy",
    "RetryRecord",
    "Risk",
    "RolePolicy",
    "RuleViolation",
    "SeenIn",
    "Session",
    "StageRecord",
    "SystemClock",
    "TaintMode",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "TransientError",
    "ValueSource",
    "tool",
]
