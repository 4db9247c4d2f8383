"""Where a child run (a ``plan:`` tool's) sits in its nesting, read from the journal: the run whose
``resume`` finishes it and hands its answer up. Light on purpose: ``approve`` reads it, and
loads neither the engine nor the registry."""

from __future__ import annotations

from typing import Any


def top_run_of(store: Any, run: dict) -> str | None:
    """For a child run, the run whose ``resume`` finishes it and hands its answer up: the top of
    its nesting (its parent, or its parent's parent...); None for a run that is no child."""
    parent = (run.get("options") or {}).get("parent_run_id")
    seen = {run["run_id"]}
    while parent is not None and parent not in seen:
        seen.add(parent)
        above = store.get_run(parent)
        up = ((above or {}).get("options") or {}).get("parent_run_id")
        if up is None:
            return parent
        parent = up
    return parent


def continue_with(store: Any, run: dict) -> str:
    """What to run after answering a run's approval: ``toolloop resume`` of the run, or for a child
    run, of the top run (which resumes the child first and takes its answer)."""
    top = top_run_of(store, run)
    if top is None:
        return f"continue with: toolloop resume {run['run_id']}"
    parent = run["options"]["parent_run_id"]
    return (f"continue with: toolloop resume {top} (run {run['run_id']} is a child run of {parent};"
            f" resuming {top} resumes it first and takes its answer)")
