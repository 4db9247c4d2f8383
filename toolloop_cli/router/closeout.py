"""Closeout: the final model writes the answer from the observations only; the answer is
checked against the plan's schema and outcomes, repaired once, and routed."""

from __future__ import annotations

import json
from typing import Any, Mapping

from ._text import bounded, one_object, to_json
from .decisions import SCHEMA_CHARS, show_context, show_observations
from .prompts import Prompts, packaged_prompts
from .views import LoopView, Message

#: the loop's own outcomes; a plan's declared outcomes may not reuse these names
ENGINE_OUTCOMES = ("final", "max_iterations", "budget_exceeded", "timeout", "aborted", "parse_error",
                   "malformed_output", "duplicate_action", "paused", "guardrail_violation", "provider_error")
#: how much of a rejected answer the repair request shows back to the model
REPLY_CHARS = 8000
MAX_ERRORS = 10


def final_messages(view: LoopView, final_schema: Any = None, prompts: Prompts | None = None) -> list[Message]:
    """The closeout request: goal, context and the observations (rejected decisions are not
    evidence and are left out), the schema the answer must meet and the declared outcomes."""
    p = (prompts or packaged_prompts()).final
    outcomes = ""
    if view.outcomes:
        outcomes = "\n" + p.fill("outcomes", outcomes=", ".join(json.dumps(o) for o in view.outcomes)) + "\n"
    schema = {} if final_schema is None else final_schema
    turn = p.fill(
        "turn",
        goal=view.goal,
        context=show_context(view.context),
        observations=show_observations(view.observations, p, with_rejections=False),
        schema=bounded(to_json(schema), SCHEMA_CHARS),
        outcomes=outcomes,
    )
    return [{"role": "system", "content": p.fill("system")}, {"role": "user", "content": turn}]


def check_final(text: str, validator_or_schema: Any, outcomes: tuple[str, ...] | list[str] | None) -> tuple[Any, None] | tuple[None, list[str]]:
    """``(answer, None)`` when the reply is one JSON object that meets the schema (a compiled
    validator, a schema, or ``None`` for none) and, when outcomes are declared, carries one of
    them as ``outcome``; else ``(None, errors)`` with messages the model can act on."""
    answer = one_object(text, "the answer")
    if isinstance(answer, str):
        return None, [answer]
    errors: list[str] = []
    validator = _validator(validator_or_schema)
    if validator is not None:
        from ..contract.schemas import schema_errors

        errors.extend(schema_errors(validator, answer, limit=MAX_ERRORS))
    if outcomes:
        allowed = ", ".join(json.dumps(o) for o in outcomes)
        if "outcome" not in answer:
            errors.append(f"the answer has no 'outcome'; it must be one of: {allowed}")
        elif answer["outcome"] not in outcomes:
            errors.append(f"'outcome' is {bounded(to_json(answer['outcome']), 80)}; it must be one of: {allowed}")
    if errors:
        return None, errors[:MAX_ERRORS]
    return answer, None


def _validator(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, (dict, bool)):
        from ..contract.schemas import compile_validator

        return compile_validator(value, mask=False)
    return value


def repair_messages(previous_messages: list[Message], reply_text: str, errors: list[str],
                    prompts: Prompts | None = None) -> list[Message]:
    """The one repair request: the closeout conversation, the rejected reply, and its errors."""
    p = (prompts or packaged_prompts()).repair
    listed = "\n".join(p.fill("error", message=e) for e in errors[:MAX_ERRORS])
    return [*previous_messages, {"role": "assistant", "content": bounded(reply_text, REPLY_CHARS)},
            {"role": "user", "content": p.fill("turn", errors=listed)}]


def route_of(outcome: str, final: Any, routes: Mapping[str, str] | None) -> str | None:
    """The route label: ``routes[final.outcome]`` when the run ended ``final`` and that key
    exists, else ``routes[outcome]``, else ``None``."""
    if not routes:
        return None
    if outcome == "final" and isinstance(final, dict):
        declared = final.get("outcome")
        if isinstance(declared, str) and declared in routes:
            return routes[declared]
    return routes.get(outcome)
