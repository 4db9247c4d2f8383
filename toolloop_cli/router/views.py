"""What the router is shown: plain frozen data the engine's routed runner fills in each turn.

The router never reads the journal or the contract at run time; everything a decision, a
closeout or a verdict depends on arrives in these views.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: one chat message: ``{"role": "system" | "user" | "assistant", "content": str}``
Message = dict[str, str]


@dataclass(frozen=True, slots=True)
class ToolView:
    """An allowed tool as the model sees it."""

    id: str
    description: str
    input_schema: Any
    effect: str  # read | write | destructive


@dataclass(frozen=True, slots=True)
class Observation:
    """What one earlier turn left for the model: a tool's status and a bounded summary of its
    redacted result or error, or why a decision was rejected (``rejected`` names the kind)."""

    iteration: int
    tool: str | None
    status: str  # a receipt status (ok, error, denied, ...), "rejected", or "withheld"
    summary: str
    rejected: str | None = None
    #: the (redacted) arguments the model proposed, so it can tell its own calls apart
    args: Any = None


@dataclass(frozen=True, slots=True)
class Budgets:
    """What is left of each budget when the turn starts."""

    iterations_left: int
    tokens_left: int
    tool_calls_left: int
    seconds_left: float
    cost_left_usd: float | None = None


@dataclass(frozen=True, slots=True)
class LoopView:
    """Everything the router model is shown for one turn (and the final model at closeout)."""

    goal: str
    context: Any
    instructions: str | None
    tools: tuple[ToolView, ...]
    observations: tuple[Observation, ...]
    budgets: Budgets
    steer: tuple[str, ...] = ()
    outcomes: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Malformed:
    """A reply that holds no valid decision, answer or verdict; ``why`` is written for the model
    to act on and quotes at most a short excerpt of the reply."""

    why: str


@dataclass(frozen=True, slots=True)
class Usage:
    """What a run has used so far (for the judge's view of the trajectory)."""

    iterations: int
    tokens: int
    tool_calls: int
    seconds: float
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """One turn of the trajectory as the judge sees it."""

    iteration: int
    action: str  # call | final | abort | malformed
    tool: str | None = None
    args: Any = None
    reason: str | None = None
    observation: Observation | None = None


@dataclass(frozen=True, slots=True)
class Trajectory:
    """The run so far, for the judge: goal, turns (newest last) and budgets used."""

    goal: str
    steps: tuple[Step, ...]
    used: Usage
    left: Budgets
