"""Supervisor rules, evaluated purely: the runner's counters in, the rules that fire out.

Thresholds:

- ``tool_repeated {count: N, tool?}``: the same tool with the same canonical arguments has been
  proposed N times in the run (rejected duplicates included, not necessarily in a row); with
  ``tool`` only that tool counts;
- ``effect_count {effect, count: N}``: more than N calls of that effect have run;
- ``budget_fraction {gt: F}``: any budget (iterations, tokens, tool calls, time, cost) is more
  than F used;
- ``iteration_reached {gte: N}``: the run is at iteration N or later.

A rule fires once per run, unless its action is ``steer``: a steering rule may fire again once
another turn has passed since it last fired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

RULE_KINDS = ("tool_repeated", "budget_fraction", "iteration_reached", "effect_count")


@dataclass(frozen=True, slots=True)
class Rule:
    """One admitted rule; ``index`` is its place in the plan's list (it identifies the rule)."""

    index: int
    when: Literal["tool_repeated", "budget_fraction", "iteration_reached", "effect_count"]
    action: Literal["abort", "pause", "steer"]
    count: int | None = None
    tool: str | None = None
    gt: float | None = None
    gte: int | None = None
    effect: str | None = None


@dataclass(frozen=True, slots=True)
class SupervisorState:
    """The runner's counters after a turn."""

    iteration: int
    #: proposals per (tool, args_sha256), rejected ones included
    proposals: Mapping[tuple[str, str], int] = field(default_factory=dict)
    #: calls that ran, per effect (read, write, destructive)
    effects_run: Mapping[str, int] = field(default_factory=dict)
    #: used fraction of each budget: iterations, tokens, tool_calls, time, cost
    fractions: Mapping[str, float] = field(default_factory=dict)
    #: rule index -> the iteration at which it last fired
    fired: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hit:
    rule_name: str
    reason: str
    rule_index: int
    action: str


def check_rules(rules: tuple[Rule, ...] | list[Rule], state: SupervisorState) -> list[Hit]:
    """The rules that fire now, in the plan's order."""
    hits = []
    for rule in rules:
        last = state.fired.get(rule.index)
        if last is not None and (rule.action != "steer" or state.iteration <= last):
            continue
        reason = _reason(rule, state)
        if reason is not None:
            hits.append(Hit(rule.when, reason, rule.index, rule.action))
    return hits


def _reason(rule: Rule, s: SupervisorState) -> str | None:
    if rule.when == "tool_repeated":
        assert rule.count is not None
        for (tool, _), n in sorted(s.proposals.items()):
            if (rule.tool is None or tool == rule.tool) and n >= rule.count:
                return f"'{tool}' was proposed {n} times with the same arguments (limit {rule.count})"
        return None
    if rule.when == "effect_count":
        assert rule.count is not None and rule.effect is not None
        n = s.effects_run.get(rule.effect, 0)
        return f"{n} {rule.effect} calls have run (more than {rule.count})" if n > rule.count else None
    if rule.when == "budget_fraction":
        assert rule.gt is not None
        for name, used in sorted(s.fractions.items()):
            if used > rule.gt:
                return f"{_pct(used)} of the {name} budget is used (more than {_pct(rule.gt)})"
        return None
    assert rule.gte is not None
    return f"iteration {s.iteration} reached (rule: {rule.gte} or more)" if s.iteration >= rule.gte else None


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"
