"""The judge: the App's judge prompt and a bounded trajectory in, a verdict out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ._text import as_data, bounded, excerpt, one_object
from .decisions import attr, show_args, show_budgets
from .prompts import PromptFile, Prompts, packaged_prompts
from .views import Malformed, Message, Trajectory

#: the judge sees at most this many of the latest steps
MAX_STEPS = 20
REASON_CHARS = 500
SUMMARY_CHARS = 600


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: Literal["continue", "violation"]
    reason: str


def judge_messages(prompt_text: str, trajectory: Trajectory, prompts: Prompts | None = None) -> list[Message]:
    """The judge's request: the App's prompt and the reply format as the system message, the
    run so far (latest ``MAX_STEPS`` steps, each bounded) as the user message."""
    p = (prompts or packaged_prompts()).judge
    if p is None:
        from .prompts import read_packaged

        p = read_packaged("judge.md")
    steps = trajectory.steps[-MAX_STEPS:]
    shown = []
    if len(trajectory.steps) > len(steps):
        shown.append(p.fill("omitted", count=len(trajectory.steps) - len(steps)))
    for s in steps:
        o = s.observation
        shown.append(p.fill(
            "step", iteration=s.iteration, action=attr(s.action), tool=attr(s.tool),
            status=attr(o.rejected or o.status) if o is not None else "",
            args=show_args(s.args), reason=as_data(bounded(s.reason or "", REASON_CHARS)),
            summary=as_data(bounded(o.summary, SUMMARY_CHARS)) if o is not None else "",
        ))
    turn = p.fill("turn", goal=trajectory.goal, steps="\n".join(shown) if shown else p.fill("none_yet"),
                  used=_used(trajectory, p), left=show_budgets(trajectory.left, p, "left"))
    system = prompt_text.strip() + "\n\n" + p.fill("system")
    return [{"role": "system", "content": system}, {"role": "user", "content": turn}]


def _used(t: Trajectory, p: PromptFile) -> str:
    u = t.used
    cost = "" if u.cost_usd is None else p.fill("cost", cost_usd=f"{u.cost_usd:.4f}")
    return p.fill("used", iterations=u.iterations, tokens=u.tokens, tool_calls=u.tool_calls,
                  seconds=int(u.seconds), cost=cost)


def parse_verdict(text: str) -> Verdict | Malformed:
    """``{"verdict": "continue" | "violation", "reason": "..."}``, strictly; else ``Malformed``."""
    value = one_object(text, 'a verdict: {"verdict": "continue" | "violation", "reason": "..."}')
    if isinstance(value, str):
        return Malformed(value)
    extra = sorted(k for k in value if k not in ("verdict", "reason"))
    if extra:
        return Malformed(f"a verdict has only the keys verdict and reason; remove {', '.join(excerpt(k) for k in extra)}")
    verdict = value.get("verdict")
    if verdict not in ("continue", "violation"):
        shown = "nothing" if "verdict" not in value else excerpt(str(verdict))
        return Malformed(f"'verdict' must be 'continue' or 'violation', found {shown}")
    reason = value.get("reason")
    if not isinstance(reason, str):
        return Malformed("'reason' must be a string")
    return Verdict(verdict, reason)
