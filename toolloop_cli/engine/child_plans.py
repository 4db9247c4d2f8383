"""Agents as tools: a registry tool ``plan: FILE`` runs that routed plan as a child run.

The executor for ``plan`` tools: each call is a child run of the running one, with its own run id
in the journal (``parent_run_id`` and the parent receipt's id in its summary), its own budget and
every gate of its own tools, run inside the parent's event loop and journaled through the parent's
journal writer. The call's arguments are the child's ``context``. Outcome ``final`` gives the
answer as the call's result; any other outcome an ``error`` whose kind is the outcome; a child
paused for approval pauses its parent, and ``resume`` of the parent resumes the child first.

The child's tokens and cost count toward its parent's budgets too (``RoutedRunner`` charges them
to the parent's ``children`` part as they are spent), and it stops when the parent's remaining
budget is spent. Nesting is capped by the top plan's ``runner_defaults.max_depth``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..contract.compiled import ToolSpec
from ..plan.admit import AdmittedPlan
from .child_runs import ChildFailed, ChildPaused, ChildResult
from .identity import current_call
from .session import RunSession, new_run_id


class ChildPlanExecutor:
    """Runs the calls of ``plan`` tools as child runs of ``parent``."""

    name = "plan"
    abandons = False  # a child run is cancelled with its call

    def __init__(self, parent: RunSession, plans: dict[str, AdmittedPlan]):
        self.parent = parent
        self.plans = plans

    async def prepare(self, tool: ToolSpec, args: dict) -> None:
        return None

    async def run(self, tool: ToolSpec, args: dict, prepared: Any, slot: Any) -> Any:
        from .routed import RoutedRunner

        parent = self.parent
        plan = self.plans[tool.ref]
        ident = current_call()
        run_id, recording = self._resumable(ident.seq, plan)
        if recording is None:
            plan = dataclasses.replace(plan, routed=dataclasses.replace(plan.routed, context=args))  # type: ignore[arg-type]
        child = RunSession(parent.store, lambda _rec: None, parent.options, run_id=run_id, contract=plan.contract,
                           mode="routed", subagent=plan.subagent.id, total_calls=0, owner=parent.owner,
                           parent=(parent.run_id, ident.receipt_id), depth=parent.depth + 1)
        child.parent_seq = ident.seq
        # one set of secrets for the family: a key or a value either run's model saw is scrubbed in both
        parent.ctx.services.secrets.add(child.ctx.services.secrets.values())
        child.ctx.services.secrets = parent.ctx.services.secrets
        install(child, self.plans)
        budget = parent.ctx.services.budget  # the parent loop's budget ledger, when it has one
        # the journal keeps the context as the parent's receipt shows it: a redacted value never lands there
        red = parent.ctx.redactor(tool)
        parent.ctx.services.secrets.add(red.secrets(args))
        runner = RoutedRunner(plan, recording=recording, parent_budget=budget,
                              journal_context=red.apply(args) if recording is None and red.active else None)
        result = await child.run_child(runner, parent.journal)  # type: ignore[arg-type]
        summary = result.summary
        outcome = summary.get("outcome")
        if outcome == "final":
            return ChildResult(summary.get("final"), run_id)
        if outcome == "paused" or summary.get("status") in ("stopped", "interrupted"):
            raise ChildPaused(run_id, ident.call_key)
        raise ChildFailed(outcome or summary.get("status") or "error",
                          f"child run {run_id} ended {outcome or summary.get('status')}", run_id)

    def _resumable(self, seq: int, plan: AdmittedPlan) -> tuple[str, Any]:
        """A child run this call already started and did not finish (the parent is being resumed):
        its id and what its journal holds; else a new id and nothing."""
        store, parent = self.parent.store, self.parent
        found = store.child_run(parent.run_id, seq)
        if found is None or found["status"] in ("ok", "failed", "rejected"):
            return new_run_id(), None
        from .resume import prepare_routed_journal

        return found["run_id"], prepare_routed_journal(store, found)


def install(session: RunSession, plans: dict[str, AdmittedPlan]) -> None:
    """Let the session's run call ``plan`` tools (a no-op when the plan has none)."""
    if plans:
        session.ctx.services.executors.install("plan", ChildPlanExecutor(session, plans))  # type: ignore[union-attr]
