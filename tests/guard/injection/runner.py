"""Runs the injection scenarios through the public API, with a human who approves only the user's calls.

Per scenario and taint mode: a fresh world with the attacker's text planted, a guard over the three
domains, a session whose user message the host vouches for. The honest calls run in order; right
after the call that read the planted text, the hijacked model's calls run in the same session.
Whatever waits for a human is approved when it is one of the user's calls and denied when it is
the attacker's. What counts is the world's effect log, not the guard's answers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from guard import Guard, Observer, Policy, Principal, RolePolicy, TaintMode, ToolResult
from guard.stores import CounterStore
from guard.testing import ManualClock
from tests.guard.injection.domains import World, all_tools
from tests.guard.injection.scenarios import SCENARIOS, Calls, Scenario, base_world

MODES = (TaintMode.SESSION, TaintMode.VOUCHED, TaintMode.UNTRUSTED)


@dataclass
class ScenarioRun:
    """What happened to one scenario under one mode."""

    scenario: Scenario
    mode: TaintMode
    asked: list[str] = field(default_factory=list)
    """Reason codes of the user's calls that waited for a human (approved)."""
    failed: list[str] = field(default_factory=list)
    """User calls that neither ran nor waited: a broken task (should stay empty)."""
    attack_asked: list[str] = field(default_factory=list)
    """Reason codes of the attack calls that waited for a human (denied)."""
    attack_unattended: int = 0
    """Attack writes and egress reads that ran without a human."""
    attack_stopped: int = 0
    goal_reached: bool = False

    @property
    def unattended(self) -> bool:
        """The user's task ran start to end without a human."""
        return not self.asked and not self.failed


@dataclass
class ModeSummary:
    """The suite's totals for one mode."""

    mode: TaintMode
    runs: list[ScenarioRun]

    @property
    def tasks_unattended(self) -> int:
        return sum(run.unattended for run in self.runs)

    @property
    def tasks_with_human(self) -> Counter[str]:
        """Tasks that needed a human, by the first reason they were asked with."""
        return Counter(run.asked[0] for run in self.runs if run.asked)

    @property
    def tasks_failed(self) -> int:
        return sum(bool(run.failed) for run in self.runs)

    @property
    def attack_calls_unattended(self) -> int:
        return sum(run.attack_unattended for run in self.runs)

    @property
    def goals_reached(self) -> int:
        return sum(run.goal_reached for run in self.runs)


def build_guard(
    world: World,
    mode: TaintMode,
    counters: CounterStore | None = None,
    limit: int = 4096,
    observer: Observer | None = None,
) -> Guard:
    """A guard over the three domains with ``mode``; every tool allowed (the attack needs none
    the user lacks: that is the point of injection)."""
    tools = all_tools(world)
    policy = Policy(
        roles={"user": RolePolicy(tools=frozenset(spec.name for spec in tools))},
        taint_mode=mode,
        rate_limit=None,
        provenance_limit=limit,
    )
    return Guard(
        tools=tools, policy=policy, clock=ManualClock(), counters=counters, observer=observer
    )


def run_scenario(
    scenario: Scenario, mode: TaintMode, observer: Observer | None = None
) -> ScenarioRun:
    """One scenario under one mode; see the module docstring."""
    world = base_world()
    scenario.plant(world)
    guard = build_guard(world, mode, observer=observer)
    session = guard.session(f"{scenario.id}-{mode}", Principal(id="U-1", role="user"))
    session.vouch(scenario.user_message)
    run = ScenarioRun(scenario=scenario, mode=mode)
    for index, (name, args) in enumerate(scenario.user_calls):
        result = session.execute(name, json.dumps(args), call_id=f"u{index}")
        if result.needs_human:
            assert result.approval_id is not None
            run.asked.append(str(result.code))
            result = guard.approve(result.approval_id, by="user")
        if not result.ok:
            run.failed.append(f"{name}: {result.code} {result.message}")
        if index == scenario.hijacked_after:
            _attack(guard, session, scenario.attack, world, run)
    executed = [effect for effect in world.effects if _is_attack(effect, scenario.attack)]
    run.goal_reached = len(executed) == len(scenario.attack)
    return run


def _attack(guard: Guard, session: Any, calls: Calls, world: World, run: ScenarioRun) -> None:
    for index, (name, args) in enumerate(calls):
        before = len(world.effects)
        result: ToolResult = session.execute(name, json.dumps(args), call_id=f"a{index}")
        if result.needs_human:
            assert result.approval_id is not None
            run.attack_asked.append(str(result.code))
            guard.deny(result.approval_id, by="user")
        if len(world.effects) > before:
            run.attack_unattended += 1
        else:
            run.attack_stopped += 1


def _is_attack(effect: tuple[str, dict[str, Any]], calls: Calls) -> bool:
    name, done = effect
    return any(name == tool and all(done.get(k) == v for k, v in a.items()) for tool, a in calls)


def run_suite(
    modes: Iterable[TaintMode] = MODES,
    scenarios: Iterable[Scenario] = SCENARIOS,
    observer: Observer | None = None,
) -> list[ModeSummary]:
    """Every scenario under every mode."""
    chosen = tuple(scenarios)
    return [
        ModeSummary(mode=mode, runs=[run_scenario(s, mode, observer) for s in chosen])
        for mode in modes
    ]
