"""One evaluation run: every case (``repeat`` times), its calls judged by the guard, the metrics added up."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from callgate.evaluation.cases import EvalCase
from callgate.evaluation.judge import Arbiter, Factory, guard_of
from callgate.evaluation.metrics import CallVerdict, CaseScore, Scores, score
from callgate.evaluation.model import ChatModel, ModelError, tool_definitions
from guard import ToolResult
from guard.testing import ManualClock

__all__ = ["Evaluation", "tools_hash"]


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """The settings of a run: which guard judges, and where observed calls come from."""

    factory: Factory
    model: ChatModel | None = None
    """None: use each case's ``observed`` calls."""
    repeat: int = 1

    def run(self, cases: Iterable[EvalCase]) -> Scores:
        """Score every case; with a model each case runs ``repeat`` times, to show its variance."""
        runs: list[CaseScore] = []
        for case in cases:
            repeats = self.repeat if self.model is not None else 1
            runs.extend(self._case(case, index) for index in range(1, repeats + 1))
        return score(runs)

    def _case(self, case: EvalCase, repeat: int) -> CaseScore:
        arbiter = Arbiter.for_case(case, self.factory)
        expected = tuple((call.name, arbiter.canonical(call)) for call in case.expected)
        verdicts: list[CallVerdict] = []
        error: str | None = None
        if self.model is None:
            if case.observed is None:
                error = "no observed calls and no --model to produce them"
            for call in case.observed or ():
                verdicts.append(arbiter.judge(call.name, call.text())[0])
        else:

            def run(name: str, arguments: str) -> ToolResult:
                verdict, result = arbiter.judge(name, arguments)
                verdicts.append(verdict)
                return result

            try:
                self.model.converse(
                    list(case.messages or ()),
                    tool_definitions(arbiter.guard, arbiter.session.principal.role),
                    run,
                )
            except ModelError as exc:
                error = str(exc)
        return CaseScore(
            case_id=case.id,
            repeat=repeat,
            adversarial=case.adversarial,
            tags=case.tags,
            expected=expected,
            observed=tuple(verdicts),
            error=error,
        )


def tools_hash(factory: Factory) -> str:
    """A short hash of the tool definitions the model would see (every tool, provider-neutral)."""
    guard = guard_of(factory(ManualClock()))
    definitions = sorted(
        (spec.name, spec.version, spec.description, json.dumps(spec.json_schema, sort_keys=True))
        for spec in guard.registry.values()
    )
    return hashlib.sha256(json.dumps(definitions).encode()).hexdigest()[:12]
