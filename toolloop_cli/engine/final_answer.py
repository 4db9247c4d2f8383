"""How a routed run writes its final answer, part of the routed runner (``routed.py``): the final
profile writes it from the evidence, it is checked against the plan's schema and outcomes, one
repair is asked for, and the final-answer guards look at it last. Operators' controls are read
before each of its requests: an abort there is honoured."""

from __future__ import annotations

from typing import Any

from ..providers.base import CUT
from ..router.closeout import check_final, final_messages, repair_messages
from .endings import LoopEnd as _End
from .endings import quoted
from .guardrails import check_final as guard_final


class FinalAnswer:
    """The routed runner's closeout (a part of ``RoutedRunner``, which brings the budgets, the
    view, the model requests and the records it uses)."""

    async def _closeout(self) -> Any:
        """The final profile writes the answer from the evidence; one repair, then parse_error.
        Operators' controls are read before each of its requests: an abort there is honoured."""
        self._check_budgets(before_router=False)
        self._controls_before_final()
        spec = self.spec
        messages = final_messages(self._view(), spec.final_schema, spec.prompts)
        answer = await self.ask("final", messages)
        self._if_overspent()
        final, errors = check_final(answer.reply.text, spec.final_validator, spec.outcomes)
        if errors is None:
            return await self._guard_final(final)
        errors = self._if_cut(answer, errors)
        self._check_budgets(before_router=False)
        self._controls_before_final()
        answer = await self.ask("final", repair_messages(messages, answer.reply.text, errors, spec.prompts))
        self._if_overspent()
        final, errors = check_final(answer.reply.text, spec.final_validator, spec.outcomes)
        if errors is None:
            return await self._guard_final(final)
        errors = self._if_cut(answer, errors)
        raise _End("parse_error", why="the final answer failed its checks after one repair: "
                                      + quoted("; ".join(errors)))

    def _controls_before_final(self) -> None:
        it = self.ledger.iterations
        why = self.supervision.read_controls(it, live=not self.models.will_reuse("final"), shown=False)
        if why is not None:
            raise _End("aborted", why=why)

    @staticmethod
    def _if_cut(answer: Any, errors: list[str]) -> list[str]:
        """A reply that stopped at the output token limit says so first: its flaws may be only that."""
        return [f"the reply was {CUT}", *errors] if answer.reply.cut else errors

    async def _guard_final(self, final: Any) -> Any:
        act = await guard_final(self.spec.final_guards, final)
        if act is not None:
            self._record_guard(self.ledger.iterations, act.guard, None, act.action, act.reason)
            raise _End("guardrail_violation", why=f"the final-answer guard {act.guard} blocked the answer: "
                                                  f"{quoted(act.reason or 'blocked')}")
        return final
