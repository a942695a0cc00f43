"""Evaluation of tool use: labelled cases in, precision, recall, abstention, argument validity and
correctness, and unauthorised-call prevention out, each with its counts and a Wilson interval."""

from callgate.evaluation.baseline import compare
from callgate.evaluation.cases import CaseError, CaseFile, EvalCase, ExpectedCall, load_cases
from callgate.evaluation.judge import Arbiter
from callgate.evaluation.metrics import CallVerdict, CaseScore, Rate, Scores, score, wilson
from callgate.evaluation.model import ChatModel, ModelError
from callgate.evaluation.runner import Evaluation, tools_hash

__all__ = [
    "Arbiter",
    "CallVerdict",
    "CaseError",
    "CaseFile",
    "CaseScore",
    "ChatModel",
    "EvalCase",
    "Evaluation",
    "ExpectedCall",
    "ModelError",
    "Rate",
    "Scores",
    "compare",
    "load_cases",
    "score",
    "tools_hash",
    "wilson",
]
