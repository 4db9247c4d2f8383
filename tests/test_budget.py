"""The budget ledger (engine/budget.py): what charges it from each source, what it says is left,
and the fractions the supervisor's rules read."""

from __future__ import annotations

import pytest

from toolloop_cli.engine.budget import BudgetLedger
from toolloop_cli.plan.routed import Budget


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def ledger(parent: BudgetLedger | None = None, *, clock: Clock | None = None, seconds_used: float = 0.0,
           **budget: object) -> BudgetLedger:
    b = Budget(**{"max_iterations": 10, "max_tokens": 1000, "max_tool_calls": 4, "timeout_s": 60.0, **budget})
    return BudgetLedger(b, parent=parent, clock=clock or Clock(), seconds_used=seconds_used)


def test_a_model_request_charges_its_part_tokens_and_cost():
    led = ledger(max_cost_usd=1.0)
    led.charge_request("router", 100, 20, 0.25)
    led.charge_request("final", 30, 10, None)
    assert (led.tokens_in, led.tokens_out, led.tokens) == (130, 30, 160)
    assert led.cost_usd == 0.25
    assert led.summary()["by_part"] == {"router": {"tokens": 120, "cost_usd": 0.25},
                                        "final": {"tokens": 40, "cost_usd": None},
                                        "judge": {"tokens": 0, "cost_usd": None},
                                        "children": {"tokens": 0, "cost_usd": None}}
    assert led.tokens_left() == 840 and led.cost_left() == 0.75


def test_a_child_run_charges_its_parent_and_grandparent_as_children():
    top = ledger(max_tokens=500, max_cost_usd=2.0)
    child = ledger(top, max_tokens=10_000)
    grandchild = ledger(child, max_tokens=10_000)
    grandchild.charge_request("router", 100, 100, 0.5)
    assert grandchild.by_part["router"] == {"tokens": 200, "cost_usd": 0.5}
    assert child.by_part == {"children": {"tokens": 200, "cost_usd": 0.5}}
    assert top.by_part == {"children": {"tokens": 200, "cost_usd": 0.5}}
    # a child may never spend more than its parent has left
    assert grandchild.tokens_left() == 300 and grandchild.cost_left() == 1.5
    top.charge_request("router", 300, 0, 1.5)
    assert grandchild.exhausted() and not grandchild.spent()
    assert grandchild.exceeded_why() == ("the parent run's budget is spent (its children's tokens and cost count"
                                         " toward it)")


def test_dispatched_calls_take_what_the_loop_left():
    led = ledger(max_tool_calls=3)
    led.count_tool_call()
    assert led.take_tool_call() and led.take_tool_call()
    assert not led.take_tool_call()
    assert led.tool_calls == 3 and led.tool_calls_left() == 0


def test_turns_tokens_and_dollars_end_the_loop_at_their_limits():
    led = ledger(max_iterations=2, max_tokens=100, max_cost_usd=1.0)
    assert led.count_turn() == 1 and not led.turns_used()
    led.count_turn()
    assert led.turns_used()
    led.charge_request("router", 60, 40, 0.5)
    assert led.spent() and not led.overspent()
    assert led.exceeded_why() == "the run used 100 tokens of its max_tokens 100"
    led.charge_request("router", 1, 0, 0.5)
    assert led.overspent()
    dollars = ledger(max_cost_usd=1.0)
    dollars.charge_request("router", 1, 1, 1.25)
    assert dollars.exceeded_why() == "the run spent 1.25 US dollars of its max_cost_usd 1"


def test_the_fractions_the_supervisor_reads():
    clock = Clock()
    led = ledger(clock=clock, seconds_used=6.0, max_cost_usd=2.0)
    assert led.start() == pytest.approx(154.0)  # what a resumed run used before is not given again
    clock.now += 9.0
    led.count_turn()
    led.count_tool_call()
    led.charge_request("router", 200, 50, 0.5)
    assert led.fractions() == {"iterations": 0.1, "tokens": 0.25, "tool_calls": 0.25, "time": 0.25, "cost": 0.25}
    assert "cost" not in ledger().fractions()
    left = led.left()
    assert (left.iterations_left, left.tokens_left, left.tool_calls_left, left.cost_left_usd) == (9, 750, 3, 1.5)
    assert left.seconds_left == pytest.approx(45.0)
    used = led.usage()
    assert (used.iterations, used.tokens, used.tool_calls, used.cost_usd) == (1, 250, 1, 0.5)
    assert used.seconds == pytest.approx(15.0)


def test_the_overshoot_is_what_was_charged_past_the_runs_own_tokens_and_dollars():
    led = ledger(max_tokens=100, max_cost_usd=1.0)
    led.charge_request("router", 60, 40, 1.0)
    assert led.overshoot() is None  # at the limit is not past it
    led.charge_request("router", 30, 7, 0.25)
    assert led.overshoot() == {"tokens": 37, "cost_usd": 0.25}
    led.raise_to("max_tokens", 200)  # a raise moves the line the overshoot is measured from
    assert led.overshoot() == {"tokens": 0, "cost_usd": 0.25}
    no_cost = ledger(max_tokens=10)
    no_cost.charge_request("router", 8, 5, None)
    assert no_cost.overshoot() == {"tokens": 3, "cost_usd": None}
    assert ledger().overshoot() is None
