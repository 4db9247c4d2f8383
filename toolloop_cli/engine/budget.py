"""A routed run's budget ledger: what the run has spent of what its plan's ``budget`` allows.

The ledger counts the four things a budget bounds: the router's turns (``max_iterations``),
tokens and dollars (``max_tokens``, ``max_cost_usd``), tool calls (``max_tool_calls``) and time
(``timeout_s``, less what an earlier session of a resumed run used). It is charged from three
places:

- every model request of the run (``charge_request``: the router, the final profile, the judge);
- every child run (``plan:`` tools): a child's ledger has its parent's as ``parent``, passes each
  request's spend on to it (``charge_child``), and may never spend more than its parent has left
  (``tokens_left``, ``cost_left``);
- every call the run makes: a settled call of the loop (``count_tool_call``) and a dispatched call,
  which takes one of the calls left or is refused (``take_tool_call``, read by the gates).

The routed runner asks it whether the loop may go on; the router's view of what is left
(``left``), the supervisor's fractions spent (``fractions``) and the judge's usage (``usage``) are
read from it, and so is the message of a ``budget_exceeded`` ending (``exceeded_why``). The ledger
does not end anything itself: it only says what has been spent.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import trio

from ..router.views import Budgets, Usage

if TYPE_CHECKING:
    from ..plan.routed import Budget

#: the parts of a run its spend is reported by (the summary's ``loop.by_part``)
PARTS = ("router", "final", "judge", "children")
#: the budget fields ``resume --raise NAME=VALUE`` takes, and whether each counts whole units
FIELDS = {"max_iterations": int, "max_tokens": int, "max_tool_calls": int, "max_cost_usd": float, "timeout_s": float}


class BudgetLedger:
    """One run's spend against its ``budget`` (a ``plan.routed.Budget``); ``parent`` is the ledger
    of the run whose ``plan:`` tool started this one, which this one's spend counts toward too."""

    def __init__(self, budget: Budget, *, parent: BudgetLedger | None = None, seconds_used: float = 0.0,
                 clock: Callable[[], float] = trio.current_time):
        self.budget = budget
        self.parent = parent
        self.iterations = 0
        self.tool_calls = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd: float | None = None
        self.by_part: dict[str, dict[str, Any]] = {}
        self.seconds_used = seconds_used  # before this session (a resumed run)
        self._clock = clock
        self._t0: float | None = None
        self.deadline = float("inf")
        self.time_limit: float | None = None  # a raised timeout_s known before the loop starts

    # -- time ---------------------------------------------------------------------------------

    def start(self) -> float:
        """The loop starts now: returns its deadline (the time budget less what was used before)."""
        self._t0 = self._clock()
        self.deadline = self._t0 + max(0.0, self._time_limit() - self.seconds_used)
        return self.deadline

    def extend_time(self, timeout_s: float) -> None:
        """A raise of ``timeout_s`` a resumed run knows from its start: the deadline is set from
        it, while ``budget.timeout_s`` is raised where the run paused (``raise_to``)."""
        self.time_limit = max(self.time_limit or 0.0, timeout_s)

    def _time_limit(self) -> float:
        return max(self.budget.timeout_s, self.time_limit or 0.0)

    def seconds_spent(self) -> float:
        return self.seconds_used + (self._clock() - self._t0 if self._t0 is not None else 0.0)

    # -- charges ------------------------------------------------------------------------------

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def charge_request(self, part: str, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        """A model request of this run (``part``: the role that asked) spent this; its parent's
        ledger is charged too."""
        self._charge(part, input_tokens, output_tokens, cost)
        if self.parent is not None:
            self.parent.charge_child(input_tokens, output_tokens, cost)

    def charge_child(self, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        """A child run spent this: it counts toward this run's budgets (and its parent's)."""
        self._charge("children", input_tokens, output_tokens, cost)
        if self.parent is not None:
            self.parent.charge_child(input_tokens, output_tokens, cost)

    def _charge(self, part: str, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        self.tokens_in += input_tokens
        self.tokens_out += output_tokens
        spent = self.by_part.setdefault(part, {"tokens": 0, "cost_usd": None})
        spent["tokens"] += input_tokens + output_tokens
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost
            spent["cost_usd"] = (spent["cost_usd"] or 0.0) + cost

    def count_turn(self) -> int:
        """The router answered: one more turn. Returns the turn's number."""
        self.iterations += 1
        return self.iterations

    def count_tool_call(self) -> None:
        """A call of the loop settled (or was kept by a resume)."""
        self.tool_calls += 1

    def take_tool_call(self) -> bool:
        """A dispatched call takes one of the run's tool calls, if any is left."""
        if self.tool_calls_left() <= 0:
            return False
        self.tool_calls += 1
        return True

    # -- what is left -------------------------------------------------------------------------

    def tool_calls_left(self) -> int:
        return self.budget.max_tool_calls - self.tool_calls

    def tokens_left(self) -> int:
        """Tokens this run may still spend: its own budget, capped by its parent's."""
        own = self.budget.max_tokens - self.tokens
        return min(own, self.parent.tokens_left()) if self.parent is not None else own

    def cost_left(self) -> float | None:
        """Dollars this run may still spend (None: no cost budget anywhere above it)."""
        b = self.budget
        own = None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - (self.cost_usd or 0.0))
        above = self.parent.cost_left() if self.parent is not None else None
        if own is None:
            return above
        return own if above is None else min(own, above)

    def turns_used(self) -> bool:
        """Whether the router has taken every turn its budget gives."""
        return self.iterations >= self.budget.max_iterations

    def spent(self) -> bool:
        """Whether the run's own tokens or dollars are used up (no further request may start)."""
        b = self.budget
        return self.tokens >= b.max_tokens or (b.max_cost_usd is not None and (self.cost_usd or 0.0) >= b.max_cost_usd)

    def overspent(self) -> bool:
        """Whether a request just took the run past its own tokens or dollars."""
        b = self.budget
        return self.tokens > b.max_tokens or (b.max_cost_usd is not None and (self.cost_usd or 0.0) > b.max_cost_usd)

    def exhausted(self) -> bool:
        """Whether no further request may start: nothing left here or in a parent's budget."""
        return self.tokens_left() <= 0 or self.cost_left() == 0.0

    # -- budgets that pause (``budget.on_exceeded: pause``) ----------------------------------

    @property
    def pauses(self) -> bool:
        """Whether a budget of this run that runs out pauses it instead of ending it."""
        return self.budget.on_exceeded == "pause"

    def out_before_request(self, *, turns: bool = True) -> str | None:
        """The budget that leaves no further request: ``max_iterations`` (with ``turns``: before a
        router turn), ``max_tokens`` or ``max_cost_usd`` (this run's own), or None."""
        b = self.budget
        if turns and self.turns_used():
            return "max_iterations"
        if self.tokens >= b.max_tokens:
            return "max_tokens"
        if b.max_cost_usd is not None and (self.cost_usd or 0.0) >= b.max_cost_usd:
            return "max_cost_usd"
        return None

    def overspent_budget(self) -> str | None:
        """The budget (``max_tokens`` or ``max_cost_usd``) a request just took the run past, or None."""
        b = self.budget
        if self.tokens > b.max_tokens:
            return "max_tokens"
        if b.max_cost_usd is not None and (self.cost_usd or 0.0) > b.max_cost_usd:
            return "max_cost_usd"
        return None

    def overshoot(self) -> dict[str, Any] | None:
        """The summary's ``overshoot``: tokens and dollars charged past the run's own ``max_tokens``
        and ``max_cost_usd`` (as they stand, raises included). A request's ``max_tokens`` is capped
        to what is left, but its input and what a provider counts are known only once the reply is
        charged, so the last reply may cross a budget; None when nothing was charged past one."""
        b = self.budget
        tokens = max(0, self.tokens - b.max_tokens)
        cost = None if b.max_cost_usd is None or self.cost_usd is None else max(0.0, self.cost_usd - b.max_cost_usd)
        if tokens == 0 and not cost:
            return None
        return {"tokens": tokens, "cost_usd": None if cost is None else round(cost, 6)}

    def tool_calls_pause(self) -> bool:
        """Whether a proposed call finds the run's own ``max_tool_calls`` used up (not the
        subagent's ``runner_defaults.max_calls``, which still rejects it) and the run pauses."""
        b = self.budget
        return self.pauses and self.tool_calls_left() <= 0 and (b.max_calls_cap is None or b.max_tool_calls < b.max_calls_cap)

    def limits(self) -> dict[str, Any]:
        """Each budget as it stands now (raises included)."""
        return {name: getattr(self.budget, name) for name in FIELDS}

    def used(self) -> dict[str, Any]:
        """What has been used of each budget."""
        return {"max_iterations": self.iterations, "max_tokens": self.tokens, "max_tool_calls": self.tool_calls,
                "max_cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
                "timeout_s": round(self.seconds_spent(), 3)}

    def raise_to(self, name: str, value: float) -> Any:
        """Raise budget ``name`` to ``value`` (a person's ``resume --raise``); returns the old value.
        A raised ``max_tool_calls`` stays within ``runner_defaults.max_calls``; a raised
        ``timeout_s`` moves the deadline of a loop that has started."""
        old = getattr(self.budget, name)
        new: Any = int(value) if FIELDS[name] is int else float(value)
        if name == "max_tool_calls" and self.budget.max_calls_cap is not None:
            new = min(new, self.budget.max_calls_cap)
        self.budget = dataclasses.replace(self.budget, **{name: new})
        if name == "timeout_s" and self._t0 is not None:
            self.deadline = self._t0 + max(0.0, self._time_limit() - self.seconds_used)
        return old

    def out_why(self, name: str) -> str:
        """The reason of a ``budget`` pause: the budget that ran out and what was used of it."""
        b = self.budget
        if name == "max_iterations":
            return f"max_iterations {b.max_iterations} ran out: the router took its {self.iterations} turns"
        if name == "max_tool_calls":
            return (f"max_tool_calls {b.max_tool_calls} ran out: a call was proposed with none left"
                    f" ({self.tool_calls} used)")
        if name == "timeout_s":
            return f"timeout_s {b.timeout_s:g} s ran out: the loop ran {self.seconds_spent():.3g} s"
        return f"{name} ran out: {self.exceeded_why()}"

    # -- what others read ---------------------------------------------------------------------

    def left(self) -> Budgets:
        """What the router is told is left."""
        b = self.budget
        return Budgets(
            iterations_left=max(0, b.max_iterations - self.iterations),
            tokens_left=max(0, b.max_tokens - self.tokens),
            tool_calls_left=max(0, b.max_tool_calls - self.tool_calls),
            seconds_left=max(0.0, self.deadline - self._clock()),
            cost_left_usd=None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - (self.cost_usd or 0.0)),
        )

    def fractions(self) -> dict[str, float]:
        """How much of each budget is spent, 0.0 to 1.0 and over (the supervisor's
        ``budget_fraction`` rules read these)."""
        b = self.budget
        out = {
            "iterations": self.iterations / b.max_iterations,
            "tokens": self.tokens / b.max_tokens,
            "tool_calls": self.tool_calls / b.max_tool_calls if b.max_tool_calls else 0.0,
            "time": self.seconds_spent() / b.timeout_s,
        }
        if b.max_cost_usd:
            out["cost"] = (self.cost_usd or 0.0) / b.max_cost_usd
        return out

    def usage(self) -> Usage:
        """What the judge is told was used."""
        return Usage(self.iterations, self.tokens, self.tool_calls, self.seconds_spent(), self.cost_usd)

    def exceeded_why(self) -> str:
        """``budget_exceeded``: the budget spent and its limit (a child run: its parent's budget)."""
        b = self.budget
        if self.tokens >= b.max_tokens:
            return f"the run used {self.tokens} tokens of its max_tokens {b.max_tokens}"
        if b.max_cost_usd is not None and (self.cost_usd or 0.0) >= b.max_cost_usd:
            return f"the run spent {self.cost_usd or 0.0:.6g} US dollars of its max_cost_usd {b.max_cost_usd:g}"
        if self.parent is not None:
            return "the parent run's budget is spent (its children's tokens and cost count toward it)"
        return "the run's budget is spent"

    def summary(self) -> dict[str, Any]:
        """The spend part of the summary's ``loop``."""
        return {
            "iterations": self.iterations, "tool_calls": self.tool_calls,
            "tokens": {"input": self.tokens_in, "output": self.tokens_out},
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "by_part": {p: self.by_part.get(p, {"tokens": 0, "cost_usd": None}) for p in PARTS},
        }
