"""A journaled run as people are shown it, for ``runs list``, ``runs show`` and ``toolloop serve``:
its ``run`` record and its records in the order the run printed them."""

from __future__ import annotations

from typing import Any


def shown_status(run: dict) -> str:
    """A run still marked running whose process is gone is shown as interrupted."""
    from .store import holder_alive

    if run["status"] == "running" and (run["lease_owner"] is None or holder_alive(run["lease_owner"]) is False):
        return "interrupted"
    return run["status"]


def run_record(store: Any, run: dict) -> dict:
    """The ``run`` record of ``runs list``: id, mode, status, calls, counts so far, start, plan, labels,
    and for a child run (a ``plan:`` tool's) its parent's run id."""
    from .receipts import rfc3339

    counts = run["counts"] if run["counts"] is not None else store.counts_of(run["run_id"])
    return {
        "type": "run", "run_id": run["run_id"], "mode": run["mode"], "status": shown_status(run),
        "calls": run["total_calls"], "counts": {k: v for k, v in counts.items() if v},
        "started_at": rfc3339(run["started_at"]), "plan": run["plan_path"], "labels": run["labels"],
        "parent_run_id": (run["options"] or {}).get("parent_run_id"),
    }


def printed_records(store: Any, run: dict) -> list[dict]:
    """The run's receipts, decisions, supervisor and guardrail records, in printed order (the
    summary, kept with the run, is not among them)."""
    from .engine.history import in_output_order, with_other_records

    return with_other_records(in_output_order(store.receipts_of(run["run_id"]), run["total_calls"]),
                              store.records_of(run["run_id"]))
