"""The routed runner's state beside its budget ledger (``budget.py``): rejections per kind and
calls per tool; with the ledger's spend, what the summary's ``loop`` reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from .budget import BudgetLedger


@dataclass
class LoopState:
    """The routed runner's state: what the summary's ``loop`` reports besides the spend."""

    rejections: dict[str, int] = field(default_factory=dict)
    per_tool: dict[str, dict[str, int]] = field(default_factory=dict)

    def ran(self, tool: str, status: str) -> None:
        counts = self.per_tool.setdefault(tool, {"calls": 0, "ok": 0, "failed": 0})
        counts["calls"] += 1
        counts["ok" if status == "ok" else "failed"] += 1

    def summary(self, model_calls: int, ledger: BudgetLedger) -> dict:
        spent = ledger.summary()
        return {
            "iterations": spent["iterations"], "tool_calls": spent["tool_calls"], "model_calls": model_calls,
            "tokens": spent["tokens"], "cost_usd": spent["cost_usd"],
            "rejections": dict(sorted(self.rejections.items())),
            "per_tool": {k: self.per_tool[k] for k in sorted(self.per_tool)},
            "by_part": spent["by_part"],
        }
