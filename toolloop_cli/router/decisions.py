"""The decision contract: the router model's prompt for one turn, and its reply parsed strictly.

The model is shown the goal, the caller's context, the App's guidance, the allowed tools, the
observations of earlier turns and the remaining budgets. Context, tool declarations and
observations sit between tags and are escaped so that nothing inside them can close a tag:
tool output is data, never instructions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, TypeGuard

from ._text import as_data, bounded, excerpt, kind_of, one_object, to_json
from .prompts import PromptFile, Prompts, packaged_prompts
from .views import Budgets, LoopView, Malformed, Message, Observation

#: bounds on what one turn shows the model of values it did not write itself (the caller's
#: context is not bounded: it is passed whole, and what bounds a request is the run's token budget)
ARGS_CHARS = 600
SCHEMA_CHARS = 4000

_KEYS = {
    "call": ("action", "tool", "args", "reason"),
    "final": ("action", "reason"),
    "abort": ("action", "reason"),
}
_SHAPES = ('{"action": "call", "tool": "...", "args": {...}, "reason": "..."}, '
           '{"action": "final", "reason": "..."} or {"action": "abort", "reason": "..."}')


Action = Literal["call", "final", "abort"]


def _is_action(action: object) -> TypeGuard[Action]:
    return isinstance(action, str) and action in _KEYS


@dataclass(frozen=True, slots=True)
class Decision:
    """One valid decision: ``tool`` and ``args`` are set for ``call`` only."""

    action: Action
    reason: str
    tool: str | None = None
    args: dict[str, Any] | None = None


def router_messages(view: LoopView, prompts: Prompts | None = None) -> list[Message]:
    """The messages of one router turn: the packaged system prompt (with the App's guidance)
    and the turn's state."""
    return RouterPrompt(prompts).messages(view)


class RouterPrompt:
    """The router's messages of one run, turn after turn, as ``router_messages`` writes them:
    what stays the same for the run (the system prompt, the tool declarations) is rendered once,
    and each observation when it is first shown, then kept; so building a turn's prompt does not
    grow with the number of earlier turns beyond joining their kept text."""

    def __init__(self, prompts: Prompts | None = None):
        self._p = (prompts or packaged_prompts()).router
        self._fixed_for: tuple[Any, ...] | None = None
        self._system = self._tools = ""
        self._shown: tuple[Observation, ...] = ()  # the observations whose text is kept
        self._joined = ""  # the texts joined, as a turn shows them

    def messages(self, view: LoopView) -> list[Message]:
        p = self._p
        self._fix(view)
        turn = p.fill(
            "turn",
            goal=view.goal,
            context=show_context(view.context),
            tools=self._tools,
            observations=self._observations(view.observations),
            budgets=show_budgets(view.budgets, p, "budgets"),
            steer="".join("\n" + p.fill("steer", message=m) + "\n" for m in view.steer),
        )
        return [{"role": "system", "content": self._system}, {"role": "user", "content": turn}]

    def _fix(self, view: LoopView) -> None:
        """The system prompt and the tools, rendered again only when the view's instructions or
        tools change."""
        key = (view.instructions, view.tools)
        if self._fixed_for is not None and self._fixed_for[0] == key[0] and self._fixed_for[1] is key[1]:
            return
        p = self._p
        system = p.fill("system")
        if view.instructions:
            system += "\n\n" + p.fill("guidance", instructions=view.instructions.strip())
        self._system, self._fixed_for = system, key
        self._tools = "\n".join(
            p.fill("tool", id=attr(t.id), effect=attr(t.effect), description=as_data(t.description),
                   input_schema=as_data(bounded(to_json(t.input_schema), SCHEMA_CHARS)))
            for t in view.tools
        )

    def _observations(self, observations: tuple[Observation, ...]) -> str:
        """The observations' text: when those shown before lead the turn's (the usual case: a
        loop only adds observations; compared as tuples, element by element in C, each first by
        identity), their joined text is kept and only the new ones are rendered and added; else
        every one is rendered again (an equal observation renders the same text)."""
        k = len(self._shown)
        if k and observations[:k] == self._shown:
            new = observations[k:]
            if new:
                self._joined += "\n" + "\n".join(show_observation(o, self._p) for o in new)
        else:
            self._joined = "\n".join(show_observation(o, self._p) for o in observations)
        self._shown = observations
        return self._joined if observations else self._p.fill("none_yet")


def show_context(context: Any) -> str:
    """The caller's context, whole (never cut: the plan's author or the parent's call wrote it for
    the model), escaped as data."""
    return as_data(to_json(context))


def attr(value: Any) -> str:
    """A value placed inside a tag's attribute: no quote, no angle bracket, bounded."""
    text = "" if value is None else str(value)
    return as_data(bounded(text, 120)).replace('"', "\\u0022")


def show_observations(observations: tuple[Observation, ...], p: PromptFile, *, with_rejections: bool) -> str:
    shown = [show_observation(o, p) for o in observations if with_rejections or o.rejected is None]
    return "\n".join(shown) if shown else p.fill("none_yet")


def show_observation(o: Observation, p: PromptFile) -> str:
    """One observation (or rejected decision) in its section of ``p``."""
    if o.rejected is not None:
        return p.fill("rejection", iteration=o.iteration, tool=attr(o.tool), kind=attr(o.rejected),
                      args=show_args(o.args), summary=as_data(o.summary))
    return p.fill("observation", iteration=o.iteration, tool=attr(o.tool), status=attr(o.status),
                  args=show_args(o.args), summary=as_data(o.summary))


def show_args(args: Any) -> str:
    return as_data(bounded(to_json(args), ARGS_CHARS))


def show_budgets(b: Budgets, p: PromptFile, section: str) -> str:
    cost = "" if b.cost_left_usd is None else p.fill("cost_left", cost_left_usd=f"{max(b.cost_left_usd, 0.0):.4f}")
    return p.fill(section, iterations_left=max(b.iterations_left, 0), tokens_left=max(b.tokens_left, 0),
                  tool_calls_left=max(b.tool_calls_left, 0), seconds_left=int(max(b.seconds_left, 0.0)),
                  cost_left=cost)


def parse_decision(text: str) -> Decision | Malformed:
    """The one decision a reply holds, or ``Malformed`` saying why there is none."""
    value = one_object(text, "a decision")
    if isinstance(value, str):
        return Malformed(value)
    action = value.get("action")
    if "action" not in value:
        return Malformed(f"the decision has no 'action'; write one of {_SHAPES}")
    if not _is_action(action):
        return Malformed(f"unknown action {excerpt(str(action))}; the action is 'call', 'final' or 'abort'")
    keys = _KEYS[action]
    extra = sorted(k for k in value if k not in keys)
    if extra:
        hint = "; the answer itself is written in the next step" if action == "final" else ""
        return Malformed(f"a '{action}' decision has only the keys {', '.join(keys)}; "
                         f"remove {', '.join(excerpt(k) for k in extra)}{hint}")
    missing = [k for k in keys if k not in value]
    if missing:
        return Malformed(f"the '{action}' decision lacks {', '.join(repr(k) for k in missing)}; write {_SHAPES}")
    reason = value["reason"]
    if not isinstance(reason, str):
        return Malformed("'reason' must be a string")
    if action != "call":
        return Decision(action, reason)
    tool, args = value["tool"], value["args"]
    if not isinstance(tool, str) or not tool.strip():
        return Malformed("'tool' must be the id of one of the tools listed, as a string")
    if not isinstance(args, dict):
        return Malformed(f"'args' must be a JSON object of the tool's arguments, not {kind_of(args)}")
    return Decision("call", reason, tool, args)

