"""The stages, and the one list that puts them in order."""

from guard.stages.base import Env, Stage, reject
from guard.stages.budget import BudgetStage
from guard.stages.confirm import ConfirmStage
from guard.stages.execute import ExecuteStage
from guard.stages.idempotency import IdempotencyStage
from guard.stages.parse import ParseStage
from guard.stages.policy import PolicyStage
from guard.stages.resolve import ResolveStage
from guard.stages.rules import RuleStage
from guard.stages.schema import SchemaStage

__all__ = [
    "BudgetStage",
    "ConfirmStage",
    "Env",
    "ExecuteStage",
    "IdempotencyStage",
    "ParseStage",
    "PolicyStage",
    "ResolveStage",
    "RuleStage",
    "SchemaStage",
    "Stage",
    "default_chain",
    "reject",
]


def default_chain(env: Env) -> list[Stage]:
    """The pipeline, in order. Cheap checks that need no arguments first; schema before anything
    touches data; the key from validated arguments; scope before ownership; confirmation last so a
    human is only asked about calls that would succeed; execute the only stage with side effects."""
    return [
        BudgetStage(env=env),
        ResolveStage(env=env),
        ParseStage(env=env),
        SchemaStage(env=env),
        IdempotencyStage(env=env),
        RuleStage(env=env),
        PolicyStage(env=env),
        ConfirmStage(env=env),
        ExecuteStage(env=env),
    ]
