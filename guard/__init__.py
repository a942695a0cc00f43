"""callgate's guard: the deterministic pipeline between a model's proposed tool calls and the world."""

from guard.call import Call, Reservation, RetryRecord, StageRecord
from guard.clock import Clock, SystemClock
from guard.codes import Code
from guard.errors import ConfigurationError, GuardError, RuleViolation, TransientError
from guard.observe import BaseObserver, MultiObserver, NullObserver, Observer
from guard.pipeline import ApprovalNotFound, Guard, Session
from guard.policy import AmountLimit, Policy, RateLimit, RolePolicy
from guard.registry import (
    CheckContext,
    Effect,
    Prerequisite,
    RetryPolicy,
    Risk,
    ToolContext,
    ToolRegistry,
    ToolSpec,
    tool,
)
from guard.result import Outcome, Problem, ToolResult
from guard.session import Principal

__all__ = [
    "AmountLimit",
    "ApprovalNotFound",
    "BaseObserver",
    "Call",
    "CheckContext",
    "Clock",
    "Code",
    "ConfigurationError",
    "Effect",
    "Guard",
    "GuardError",
    "MultiObserver",
    "NullObserver",
    "Observer",
    "Outcome",
    "Policy",
    "Prerequisite",
    "Principal",
    "Problem",
    "RateLimit",
    "Reservation",
    "RetryPolicy",
    "RetryRecord",
    "Risk",
    "RolePolicy",
    "RuleViolation",
    "Session",
    "StageRecord",
    "SystemClock",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "TransientError",
    "tool",
]
