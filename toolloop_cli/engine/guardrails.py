"""Guardrails of a routed run: the plan's App callables over what the model is about to see and
over the validated final answer. They fail closed: a guard that raises, or answers anything but
``None`` or a known action, blocks.

- observation guards: ``fn(tool=..., status=..., value=...)`` with each redacted result (or error)
  before the model sees it: ``None`` allows, ``{"action": "mask", "value": ...}`` shows that value
  instead, ``{"action": "block", "reason": "..."}`` withholds the result (the model is told why);
- final guards: ``fn(answer=...)`` on the validated answer: ``None`` or a block, which ends the run
  with outcome ``guardrail_violation``.

Each action is a ``guardrail`` record; the receipt is never changed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import trio

REASON_CHARS = 500


@dataclass(frozen=True, slots=True)
class GuardAction:
    guard: str
    action: str  # mask | block
    reason: str | None
    value: Any = None  # mask: what the model sees instead


async def _call(fn: Any, **kwargs: Any) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(**kwargs)
    return await trio.to_thread.run_sync(lambda: fn(**kwargs))


def _reading(ref: str, got: Any, *, may_mask: bool) -> GuardAction | None:
    if got is None:
        return None
    if isinstance(got, dict):
        action = got.get("action")
        if action == "block":
            reason = got.get("reason")
            return GuardAction(ref, "block", str(reason)[:REASON_CHARS] if reason is not None else "blocked")
        if action == "mask" and may_mask and "value" in got:
            return GuardAction(ref, "mask", None, got["value"])
    return GuardAction(ref, "block", "the guard's answer is not None, a mask or a block; it blocks (fail closed)")


async def check_observation(guards: tuple, tool: str, status: str, value: Any) -> list[GuardAction]:
    """Every observation guard in order; a block ends the chain, a mask changes what later guards see."""
    actions: list[GuardAction] = []
    for guard in guards:
        try:
            got = await _call(guard.fn, tool=tool, status=status, value=value)
        except Exception as exc:  # noqa: BLE001 - App code: a guard that fails blocks
            actions.append(GuardAction(guard.ref, "block", f"the guard raised {type(exc).__name__}; it blocks (fail closed)"))
            return actions
        act = _reading(guard.ref, got, may_mask=True)
        if act is None:
            continue
        actions.append(act)
        if act.action == "block":
            return actions
        value = act.value
    return actions


async def check_final(guards: tuple, answer: Any) -> GuardAction | None:
    """The first final guard that blocks the answer, or None."""
    for guard in guards:
        try:
            got = await _call(guard.fn, answer=answer)
        except Exception as exc:  # noqa: BLE001 - App code: a guard that fails blocks
            return GuardAction(guard.ref, "block", f"the guard raised {type(exc).__name__}; it blocks (fail closed)")
        act = _reading(guard.ref, got, may_mask=False)
        if act is not None:
            return act
    return None
