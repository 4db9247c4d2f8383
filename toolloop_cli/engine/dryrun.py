"""What ``run --dry-run`` shows: the admitted calls, the limits, and the worst-case time."""

from __future__ import annotations

import heapq
from typing import Iterator

from ..contract.compiled import ToolSpec, timeout_of
from ..plan.admit import AdmittedPlan
from .redact import Redactor


def worst_case_call_s(tool: ToolSpec, default_timeout_s: float | None) -> float:
    """Every try runs to its timeout and every backoff takes its longest delay."""
    timeout = timeout_of(tool.timeout_s, default_timeout_s) or 0.0
    p = tool.retry
    attempts = p.max_attempts if p.on else 1
    backoff = sum(p.delay(a, 1.0) for a in range(1, attempts))
    return timeout * attempts + backoff


def dry_run_records(plan: AdmittedPlan, default_timeout_s: float | None) -> Iterator[dict]:
    lane_times = []
    for lane in plan.lanes:
        lane_s = 0.0
        for c in lane.calls:
            worst = worst_case_call_s(c.tool, default_timeout_s)
            lane_s += worst
            yield {
                "type": "planned",
                "seq": c.seq,
                "item_key": c.item_key,
                "call_key": c.call_key,
                "tool": c.tool.id,
                "effect": c.tool.effect,
                "timeout_s": timeout_of(c.tool.timeout_s, default_timeout_s),
                "max_attempts": c.tool.retry.max_attempts,
                "cacheable": c.tool.cacheable,
                "args": Redactor(c.tool.redact).apply(c.args) if c.args is not None else "(from lane payload)",
                "worst_case_s": round(worst, 3),
            }
        lane_times.append(lane_s)
    k = plan.max_concurrency if plan.mode == "parallel" else 1
    workers = [0.0] * max(1, min(k, len(lane_times) or 1))
    heapq.heapify(workers)
    for t in sorted(lane_times, reverse=True):  # longest lanes first onto the least loaded worker
        heapq.heapreplace(workers, workers[0] + t)
    yield {
        "type": "dry_run",
        "mode": plan.mode,
        "calls": plan.total_calls,
        "lanes": len(plan.lanes) if plan.mode == "parallel" else None,
        "max_concurrency": k,
        "max_calls": plan.subagent.max_calls,
        "worst_case_s": round(max(workers), 3),
        "contract_sha256": plan.contract.contract_sha256,
    }
