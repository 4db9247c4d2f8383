"""The routed runner's state: turns, calls, tokens and cost spent, rejections per kind, calls per
tool; what the summary's ``loop`` reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoopState:
    """The routed runner's state: what the summary's ``loop`` reports."""

    iterations: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float | None = None
    rejections: dict[str, int] = field(default_factory=dict)
    per_tool: dict[str, dict[str, int]] = field(default_factory=dict)
    by_part: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds_used: float = 0.0  # before this session (a resumed run)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def charge(self, part: str, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        self.tokens_in += input_tokens
        self.tokens_out += output_tokens
        spent = self.by_part.setdefault(part, {"tokens": 0, "cost_usd": None})
        spent["tokens"] += input_tokens + output_tokens
        if cost is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost
            spent["cost_usd"] = (spent["cost_usd"] or 0.0) + cost

    def ran(self, tool: str, status: str) -> None:
        counts = self.per_tool.setdefault(tool, {"calls": 0, "ok": 0, "failed": 0})
        counts["calls"] += 1
        counts["ok" if status == "ok" else "failed"] += 1

    def summary(self, model_calls: int) -> dict:
        parts = {p: self.by_part.get(p, {"tokens": 0, "cost_usd": None}) for p in ("router", "final", "judge", "children")}
        return {
            "iterations": self.iterations, "tool_calls": self.tool_calls, "model_calls": model_calls,
            "tokens": {"input": self.tokens_in, "output": self.tokens_out},
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 6),
            "rejections": dict(sorted(self.rejections.items())),
            "per_tool": {k: self.per_tool[k] for k in sorted(self.per_tool)},
            "by_part": parts,
        }
