"""``resume --raise NAME=VALUE`` (and the web API's ``{"raise": {...}}``), checked and journaled.

A routed run paused by a budget (``budget.on_exceeded: pause``), its own or a child run's, goes on
only with a raise of the budget that ran out: resuming it without one is a usage error whose hint
names that budget and what was used of it. A raise must name a budget field and be above both the
budget as it stands and what was used of it; ``--raise`` on a run that no budget paused is a usage
error too. Each raise is journaled as an operator control of kind ``raise`` (a link of the run's
hash chain, with who and when) for the run whose budget ran out, at the turn it ran out; when that
run is a child, every run above it whose own budget is below the value gets the raise too (applied
as it resumes). The runner applies them (``budget_pauses.py``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import UsageError
from .budget import FIELDS

#: the operator control kind of a raise
KIND = "raise"


def raise_message(values: dict[str, float], *, by: str | None, budget: str | None, iteration: int) -> str:
    """A raise control's message, as the runner reads it: the budget that ran out (None: raised
    for a child run's budget, applied when the run resumes) and the turn it ran out at."""
    return json.dumps({"raise": values, "by": by, "budget": budget, "iteration": iteration}, sort_keys=True)


def parse_raises(items: list[str] | None) -> dict[str, float]:
    """``NAME=VALUE`` items (``--raise``, repeatable) as a mapping; a UsageError for a bad one."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--raise {item!r}: use NAME=VALUE, e.g. --raise max_cost_usd=2.5")
        try:
            value = float(text)
        except ValueError:
            raise UsageError(f"--raise {item!r}: {text!r} is not a number") from None
        out[name] = value
    return out


def check_values(raises: dict[str, Any]) -> dict[str, float]:
    """Budget names and numbers (the web API's body too); a UsageError names the first bad one."""
    out: dict[str, float] = {}
    for name, value in raises.items():
        if name not in FIELDS:
            raise UsageError(f"--raise {name}: not a budget; raise one of {', '.join(FIELDS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(f"--raise {name}: the value must be a finite number")
        if FIELDS[name] is int and float(value) != int(value):
            raise UsageError(f"--raise {name}={value}: {name} counts whole units; give an integer")
        out[name] = float(value)
    return out


def _paused_by(run: dict) -> dict | None:
    summary = run.get("summary") if isinstance(run.get("summary"), dict) else None
    if run.get("mode") != "routed" or run.get("status") != "stopped" or summary is None:
        return None
    got = summary.get("paused_by")
    return got if isinstance(got, dict) else None


def budget_paused(store: Any, run: dict) -> list[tuple[dict, dict]]:
    """The chain of runs from ``run`` down to the one a budget paused: ``[(run, paused_by), ...]``,
    the last one's ``kind`` being ``budget``; empty when no budget paused it."""
    chain: list[tuple[dict, dict]] = []
    seen: set[str] = set()
    while run is not None and run["run_id"] not in seen:
        seen.add(run["run_id"])
        paused_by = _paused_by(run)
        if paused_by is None:
            return []
        chain.append((run, paused_by))
        if paused_by.get("kind") == "budget":
            return chain
        if paused_by.get("kind") != "child" or not paused_by.get("child_run_id"):
            return []
        run = store.get_run(paused_by["child_run_id"])
    return []


def _shown(value: Any) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def planned_raises(store: Any, run: dict, raises: dict[str, Any], *, by: str | None) -> list[tuple[str, str]]:
    """The raise controls to journal for resuming ``run``: ``[(run_id, message), ...]``. Raises
    UsageError when the raises do not let it go on (or it was not paused by a budget)."""
    values = check_values(raises)
    chain = budget_paused(store, run)
    rid = run["run_id"]
    if not chain:
        if values:
            raise UsageError(f"--raise: run {rid} is not paused by a budget (its own or a child run's);"
                             f" resume it without --raise")
        return []
    target, paused = chain[-1]
    name = paused.get("budget")
    where = rid if target is run else f"child run {target['run_id']}"
    if name not in values:
        raise UsageError(_raise_needed(rid, where, str(name), paused))
    _check_above(values, paused, where)
    planned = [(target["run_id"], raise_message(values, by=by, budget=name, iteration=_turns(target)))]
    for above, above_paused in chain[:-1]:  # the runs the child's pause paused: raised where below
        limits = above_paused.get("limits") or {}
        lifted = {k: v for k, v in values.items() if limits.get(k) is not None and v > limits[k]}
        if lifted:
            planned.append((above["run_id"], raise_message(lifted, by=by, budget=None, iteration=_turns(above))))
    return planned


def _raise_needed(rid: str, where: str, name: str, paused: dict) -> str:
    """The hint of a resume that does not raise the budget that ran out."""
    limits, used = paused.get("limits") or {}, paused.get("used") or {}
    floor = max((v for v in (limits.get(name), used.get(name)) if v is not None), default=None)
    return (f"run {rid} is paused because the budget {name} of {where} ran out"
            f" (used {_shown(used.get(name))} of {_shown(limits.get(name))}); raise it to go on:"
            f" toolloop resume {rid} --raise {name}=VALUE (VALUE above {_shown(floor)})")


def _check_above(values: dict[str, float], paused: dict, where: str) -> None:
    """Each raise above the budget as it stands and above what was used of it."""
    limits, used = paused.get("limits") or {}, paused.get("used") or {}
    for key, value in values.items():
        current, spent = limits.get(key), used.get(key)
        if current is None:
            raise UsageError(f"--raise {key}: {where} has no {key} budget to raise")
        if value <= current or (spent is not None and value <= spent):
            raise UsageError(f"--raise {key}={_shown(value)}: not above {key} as it stands for {where}"
                             f" ({_shown(current)}, used {_shown(spent)}); give a larger value")


def _turns(run: dict) -> int:
    loop = (run.get("summary") or {}).get("loop") or {}
    return int(loop.get("iterations") or 0)


def journal_raises(store: Any, planned: list[tuple[str, str]]) -> None:
    for run_id, message in planned:
        store.add_control(run_id, KIND, message)
