"""Supervisor rules, evaluated purely: the runner's counters in, the rules that fire out.

``RULES`` (at the end) is the one table of rule kinds: the fields each takes, the check of its
values at admission, why it fires (or None) and what it watches. The plan model, admission, the
runner and the docs read it; a new kind is one entry and its functions, in a module of its own
if it likes.

A rule fires once per run, unless its action is ``steer``: a steering rule may fire again once
another turn has passed since it last fired.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal, Mapping

from .convergence import Seen, no_progress, ping_pong, same_error

@dataclass(frozen=True, slots=True)
class Rule:
    """One admitted rule; ``index`` is its place in the plan's list (it identifies the rule)."""

    index: int
    when: str  # a kind of ``RULES``
    action: Literal["abort", "pause", "steer"]
    count: int | None = None
    tool: str | None = None
    gt: float | None = None
    gte: int | None = None
    effect: str | None = None
    #: said to the router instead of the plan's ``steer_message`` when this rule steers
    steer_message: str | None = None


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
    #: calls that ran, per tool: {"calls": N, "ok": N, "failed": N}
    per_tool: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: errors, proposals in order and results seen: what the convergence rules read
    convergence: Seen = field(default_factory=Seen)


@dataclass(frozen=True, slots=True)
class Hit:
    rule_name: str
    reason: str
    rule_index: int
    action: str
    steer_message: str | None = None


def check_rules(rules: tuple[Rule, ...] | list[Rule], state: SupervisorState) -> list[Hit]:
    """The rules that fire now, in the plan's order."""
    hits = []
    for rule in rules:
        last = state.fired.get(rule.index)
        if last is not None and (rule.action != "steer" or state.iteration <= last):
            continue
        reason = RULES[rule.when].reason(rule, state)
        if reason is not None:
            hits.append(Hit(rule.when, reason, rule.index, rule.action, rule.steer_message))
    return hits


#: a problem with a rule's values at admission: (field, message, hint)
RuleProblem = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class RuleKind:
    """A kind of supervisor rule: the fields a plan gives it (``required``, ``optional``), the
    check of their values at admission (``check``: a problem, or None; it sees the fields as
    the plan gives them, any of them missing), why it fires now
    (``reason``: the supervisor record's reason, or None) and what it watches (``doc``)."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    reason: Callable[[Rule, SupervisorState], str | None]
    doc: str
    check: Callable[[Rule], RuleProblem | None] = lambda rule: None

    def signature(self) -> str:
        """The kind as the docs show it, e.g. ``tool_repeated {count, tool?}``."""
        return "{" + ", ".join(self.required + tuple(f"{name}?" for name in self.optional)) + "}"


def _tool_repeated(rule: Rule, s: SupervisorState) -> str | None:
    # rejected duplicates count too, and the proposals need not be in a row; with ``tool`` only
    # that tool counts
    assert rule.count is not None
    for (tool, _), n in sorted(s.proposals.items()):
        if (rule.tool is None or tool == rule.tool) and n >= rule.count:
            return f"'{tool}' was proposed {n} times with the same arguments (limit {rule.count})"
    return None


def _count_at_least_one(rule: Rule) -> RuleProblem | None:
    if rule.count is not None and rule.count < 1:
        return "count", f"{rule.when} needs a count of at least 1", "use 1 or more"
    return None


def _effect_count(rule: Rule, s: SupervisorState) -> str | None:
    assert rule.count is not None and rule.effect is not None
    n = s.effects_run.get(rule.effect, 0)
    return f"{n} {rule.effect} calls have run (more than {rule.count})" if n > rule.count else None


def _budget_fraction(rule: Rule, s: SupervisorState) -> str | None:
    # any budget: iterations, tokens, tool calls, time, cost
    assert rule.gt is not None
    for name, used in sorted(s.fractions.items()):
        if used > rule.gt:
            return f"{_pct(used)} of the {name} budget is used (more than {_pct(rule.gt)})"
    return None


def _iteration_reached(rule: Rule, s: SupervisorState) -> str | None:
    assert rule.gte is not None
    return f"iteration {s.iteration} reached (rule: {rule.gte} or more)" if s.iteration >= rule.gte else None


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.4g}%"


#: rule kind -> what it takes, checks and says; in the order the plan schema and the docs list them
RULES: dict[str, RuleKind] = {
    "tool_repeated": RuleKind(("count",), ("tool",), _tool_repeated, check=_count_at_least_one,
                              doc="the same tool with the same arguments proposed `count` times"),
    "budget_fraction": RuleKind(("gt",), (), _budget_fraction, doc="any budget more than the fraction `gt` used"),
    "iteration_reached": RuleKind(("gte",), (), _iteration_reached, doc="the run at iteration `gte` or later"),
    "effect_count": RuleKind(("effect", "count"), (), _effect_count,
                             doc="more than `count` calls of that `effect` have run"),
    # convergence rules (``convergence.py``): loops caught before a budget runs out
    "same_error": RuleKind(("count",), ("tool",), same_error, check=_count_at_least_one,
                           doc="`count` receipts of one tool failed with the same error kind and message"),
    "ping_pong": RuleKind(("count",), (), ping_pong, check=_count_at_least_one,
                          doc="the last `2 × count` proposed calls alternate between exactly two calls"),
    "no_progress": RuleKind(("count",), (), no_progress, check=_count_at_least_one,
                            doc="`count` ok results in a row were empty or repeated an earlier result"),
}
