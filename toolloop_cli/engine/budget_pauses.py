"""Budgets that pause (``budget.on_exceeded: pause``) and the raises that let a run go on.

When a budget runs out, the routed runner asks ``BudgetPauses.out``: it writes the ``supervisor``
record ``{rule: budget, action: pause, reason}`` naming the budget, then looks for a raise a person
journaled for that very place (``toolloop resume RUN_ID --raise NAME=VALUE``, the web API's
resume): found, each raise is applied to the budget ledger and is a ``supervisor`` record
``{rule: operator, action: raise, reason: "max_cost_usd 1.0 -> 2.5", by}``, and the loop goes on
from where it stood (the reply that crossed a budget is acted on, the proposal that found no tool
call left is checked again); not found, the run pauses there (outcome ``paused``).

A raise is an operator control (kind ``raise``, a link of the run's hash chain) whose message is
``{"raise": {NAME: VALUE}, "by": WHO, "budget": NAME, "iteration": N}``: the budget that ran out and
the turn it ran out at, so a resumed run, which replays its journal, meets each pause again and
applies the raise that answered it at the same place. A raise written for a parent whose child ran
out (``budget`` null) is applied as the parent's resumed run starts, and so is every raise of
``timeout_s``: time is not replayed, so the deadline is the raised one from the start (and the
records of a time pause are written again when the replay reaches its turn).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .endings import LoopEnd
from .raises import KIND

if TYPE_CHECKING:
    from .routed import RoutedRunner

@dataclass(frozen=True, slots=True)
class Raise:
    n: int
    values: dict[str, float]
    by: str | None
    budget: str | None  # the budget that ran out (None: raised for a child's budget, applied at start)
    iteration: int
    consumed_at: int | None


def _parsed(n: int, message: str | None, consumed_at: int | None) -> Raise | None:
    try:
        body = json.loads(message or "")
        values = {str(k): float(v) for k, v in body["raise"].items()}
        return Raise(n, values, body.get("by"), body.get("budget"), int(body["iteration"]), consumed_at)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class BudgetPauses:
    """The pauses of one routed run's budgets, and the raises that answer them."""

    def __init__(self, runner: RoutedRunner):
        self.runner = runner
        self.paused_on: str | None = None  # the budget the run paused on, once it has
        self.child: dict | None = None  # the paused_by of a child run that paused this one
        self._applied: set[int] = set()

    def _raises(self) -> list[Raise]:
        run, rec = self.runner.handle, self.runner.recording
        replaying = rec is not None and rec.replay  # a replay meets the recorded run's raises (its chain checked)
        found = []
        for n, kind, message, consumed_at in (rec.raises if replaying else run.controls_after(0)):  # type: ignore[union-attr]
            if kind != KIND or (not replaying and not run.control_holds(n, kind)):
                continue
            parsed = _parsed(n, message, consumed_at)
            if parsed is not None:
                found.append(parsed)
        return found

    def at_start(self) -> None:
        """Before the loop's deadline is set: raises of ``timeout_s`` and those made for a child's
        budget (the resumed run replays its journal under them)."""
        for r in self._raises():
            if r.budget is None:
                self._apply(r, r.iteration)
            elif "timeout_s" in r.values:
                self.runner.ledger.extend_time(r.values["timeout_s"])

    def time_raised_here(self, iteration: int) -> bool:
        """Whether the run paused on its time at this turn and a raise answered it (a resumed run
        writes that pause's records again here, before the next model request)."""
        return any(r.budget == "timeout_s" and r.iteration == iteration and r.n not in self._applied
                   for r in self._raises())

    def check(self, *, before_router: bool) -> None:
        """Before a model request: a budget that leaves none pauses the run (``LoopEnd``) unless a
        journaled raise answers it here."""
        ledger = self.runner.ledger
        it = ledger.iterations
        if before_router and self.time_raised_here(it):
            self.out(it, "timeout_s")
        while (name := ledger.out_before_request(turns=before_router)) is not None:
            if self.out(it, name):
                raise LoopEnd("paused")

    def check_reply(self, iteration: int) -> None:
        """After a reply: one that took the run past its tokens or dollars pauses it (``LoopEnd``),
        kept to be acted on once a raise answers it."""
        while (name := self.runner.ledger.overspent_budget()) is not None:
            if self.out(iteration, name):
                raise LoopEnd("paused")

    def check_tool_call(self, iteration: int) -> None:
        """A call proposed with no tool call left: the proposal is kept and the run pauses
        (``LoopEnd``), unless a journaled raise answers it here."""
        if self.out(iteration, "max_tool_calls"):
            raise LoopEnd("paused")

    def out(self, iteration: int, name: str, why: str | None = None) -> bool:
        """Budget ``name`` ran out at turn ``iteration``: True when the run pauses, False when a
        journaled raise answered it (applied now) and the loop goes on."""
        runner = self.runner
        runner.record_supervisor(iteration, "budget", "pause", why or runner.ledger.out_why(name))
        answer = next((r for r in self._raises() if r.n not in self._applied and r.budget == name
                       and r.iteration == iteration), None)
        if answer is None:
            self.paused_on = name
            return True
        self._apply(answer, iteration)
        return False

    def _apply(self, r: Raise, iteration: int) -> None:
        runner, run = self.runner, self.runner.handle
        self._applied.add(r.n)
        if r.consumed_at is None and not (self.runner.recording is not None and self.runner.recording.replay):
            run.consume_control(r.n, iteration)
        for name, value in sorted(r.values.items()):
            old = runner.ledger.raise_to(name, value)
            new = getattr(runner.ledger.budget, name)
            run.record({"type": "supervisor", "run_id": run.run_id, "iteration": iteration, "rule": "operator",
                        "action": "raise", "reason": f"{name} {old} -> {new}", "by": r.by})

    def paused_by(self, outcome: str | None) -> dict | None:
        """The summary's ``paused_by``: what paused the run (``kind``: ``budget`` with the budget's
        name, ``approval``, ``child`` with the child run's own ``paused_by``, ``supervisor``),
        with each budget's limit and use as they stand; None when the run did not pause."""
        if outcome != "paused":
            return None
        ledger = self.runner.ledger
        waits = self.runner.handle.state.paused
        child = next((c for _item, _key, c in waits if c is not None), None)
        if self.paused_on is not None:
            what: dict[str, Any] = {"kind": "budget", "budget": self.paused_on}
        elif child is not None:
            what = {"kind": "child", "child_run_id": child, "child": self.child}
        else:
            what = {"kind": "approval" if waits else "supervisor"}
        return {**what, "limits": ledger.limits(), "used": ledger.used()}
