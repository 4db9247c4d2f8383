"""How a routed run's ending is told: the summary's ``error`` (why the run ended, in a person's
words, for every outcome but ``final`` and ``paused``), and the receipt of a call that was still
running when the loop ended (its ``timeout_s``, a signal, an operator's abort): ``cancelled``, or
``interrupted`` for a write or destructive call that had started, since it may or may not have
happened."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from .._text import excerpt
from ..receipts import Receipt, rfc3339
from .call import not_run_receipt
from .child_runs import cut_short_child
from .context import RunContext

#: the longest ``error.message`` (a model's or an operator's words are quoted in part)
MESSAGE_CHARS = 1000
#: how much of a model's or an operator's words a message quotes
QUOTED_CHARS = 300

#: outcomes that say nothing went wrong (the run answered, or waits to go on)
NO_ERROR = ("final", "paused")


class LoopEnd(Exception):
    """The loop ends with this outcome (and, for ``final``, the validated answer); ``why`` says
    why in a person's words (the summary's ``error``)."""

    def __init__(self, outcome: str, final: Any = None, why: str | None = None):
        self.outcome = outcome
        self.final = final
        self.why = why


@dataclass
class InFlight:
    """A routed call between its gate and its receipt."""

    iteration: int
    tool: Any
    args: dict
    seq: int
    approval: dict | None
    started_at: float = dataclasses.field(default_factory=time.time)
    t0: float = dataclasses.field(default_factory=time.perf_counter)


def error_of(outcome: str | None, why: str | None) -> dict | None:
    """The summary's ``error``: ``{kind, message}`` with ``kind`` the outcome's name, or None."""
    if outcome is None or outcome in NO_ERROR:
        return None
    message = why or f"the run ended {outcome}"
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "…"
    return {"kind": outcome, "message": message}


def timeout_why(budget: Any, during: str | None = None) -> str:
    """``timeout``: the budget that ran out, and what was waiting then."""
    text = f"the run's time budget (timeout_s {budget.timeout_s:g} s) ran out"
    return f"{text} {during}" if during else text


def quoted(text: Any) -> str:
    """A model's or an operator's words inside a message: bounded, control characters escaped."""
    return excerpt(text if isinstance(text, str) else str(text), QUOTED_CHARS)


def cut_short_receipt(ctx: RunContext, call: InFlight, *, started: bool, why: str) -> Receipt:
    """The receipt of a call the loop's end cancelled. ``why`` says how the run ended
    ("the run's time budget (timeout_s 5 s) ran out")."""
    tool = call.tool
    if started and tool.effect in ("write", "destructive"):
        status = "interrupted"
        message = (f"{why} while this call was running, so it may or may not have happened;"
                   " run it again on purpose with --retry-interrupted")
    else:
        status, message = "cancelled", f"{why} while this call was running; it was cancelled"
    child = cut_short_child(ctx, tool, call.seq)
    if child is not None:
        message += f"; its child run {child['run_id']} was cancelled with it and ended {child['status']}"
    receipt = not_run_receipt(ctx, tool, call.args, seq=call.seq, item_key=None, call_key=str(call.iteration),
                              status=status, message=message, iteration=call.iteration, approval=call.approval)
    if child is not None:
        receipt = dataclasses.replace(receipt, child_run_id=child["run_id"])
    if not started:
        return receipt
    return dataclasses.replace(receipt, attempts=1, started_at=rfc3339(call.started_at),
                               finished_at=rfc3339(time.time()),
                               duration_ms=round((time.perf_counter() - call.t0) * 1000, 3))
