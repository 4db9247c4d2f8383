"""Agents as tools: a registry tool ``plan: FILE`` runs that routed plan as a child run.

The executor for ``plan`` tools: each call is a child run of the running one, with its own run id
in the journal (``parent_run_id`` and the parent receipt's id in its summary), its own budget and
every gate of its own tools, run inside the parent's event loop and journaled through the parent's
journal writer. The call's arguments are the child's ``context``. Outcome ``final`` gives the
answer as the call's result; any other outcome an ``error`` whose kind is the outcome; a child
paused for approval pauses its parent, and ``resume`` of the parent resumes the child first.

When the parent goes on (``resume``), the call finds the child run it started: one that stopped
is resumed where it stopped, and one that finished meanwhile (``resume CHILD_RUN_ID`` on its own)
gives its answer, or its failure, without running again. Only a call that runs again on purpose
(``--retry-failed`` on a child that failed) starts a new child run.

The child's tokens and cost count toward its parent's budgets too (the child's ``BudgetLedger``
has the parent loop's ledger as its parent and charges its ``children`` part as they are spent),
and it stops when the parent's remaining budget is spent. Nesting is capped by the top plan's ``runner_defaults.max_depth``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import trio

from ..contract.compiled import ToolSpec
from ..plan.admit import AdmittedPlan
from .child_runs import ChildFailed, ChildPaused, ChildResult, redacted_pointers
from .executors import Executor
from .identity import current_call
from .session import RunSession, new_run_id

#: statuses of a child run that ended: its parent takes the outcome rather than running it
_ENDED = ("ok", "failed", "rejected")
#: why a child's running call was cut short when its parent's call was cancelled
CUT_SHORT = "the call of its parent that started this run was cancelled"


class ChildPlanExecutor(Executor):
    """Runs the calls of ``plan`` tools as child runs of ``parent``."""

    name = "plan"
    abandons = False  # a child run is cancelled with its call

    def __init__(self, parent: RunSession, plans: dict[str, AdmittedPlan], max_depth: int):
        self.parent = parent
        self.plans = plans
        self.max_depth = max_depth  # the top plan's cap, journaled with each child for its own resume

    async def prepare(self, tool: ToolSpec, args: dict) -> None:
        return None

    async def run(self, tool: ToolSpec, args: dict, prepared: Any, slot: Any) -> Any:
        from .routed import RoutedRunner

        parent = self.parent
        ident = current_call()
        found = self._earlier_child(ident.seq)
        if found is not None and found["status"] in _ENDED:
            if ((found.get("summary") or {}).get("tainted_by") and parent.ctx.services.taint is not None):
                parent.ctx.services.taint.child_tainted(found["run_id"])  # its answer is untrusted
            return _ended(found)
        run_id, recording = self._go_on(found, ident.call_key) if found is not None else (new_run_id(), None)
        # the context is always the call's arguments, also for a child that goes on (its journal
        # holds them redacted)
        plan = self.plans[tool.ref]
        plan = dataclasses.replace(plan, routed=dataclasses.replace(plan.routed, context=args))  # type: ignore[arg-type]
        child = RunSession(parent.store, lambda _rec: None, parent.options, run_id=run_id, contract=plan.contract,
                           mode="routed", subagent=plan.subagent.id, total_calls=0, owner=parent.owner,
                           parent=(parent.run_id, ident.receipt_id), depth=parent.depth + 1)
        # one set of secrets for the family: a key or a value either run's model saw is scrubbed in both
        parent.ctx.services.secrets.add(child.ctx.services.secrets.values())
        child.ctx.services.secrets = parent.ctx.services.secrets
        child.ctx.services.notify = parent.ctx.services.notify  # the top run's notify tells of its children's waits
        red = parent.ctx.redactor(tool)
        parent.ctx.services.secrets.add(red.secrets(args))
        # the journal keeps the context as the parent's receipt shows it: a redacted value never lands there
        shown = red.apply(args)
        child.child_options = {
            "parent_run_id": parent.run_id, "parent_receipt_id": ident.receipt_id, "parent_seq": ident.seq,
            "depth": child.depth, "max_depth": self.max_depth, "context": shown,
            "context_redacted": redacted_pointers(args, shown)}
        install(child, self.plans, self.max_depth)
        budget = parent.ctx.services.budget  # the parent loop's budget ledger, when it has one
        # a child started by a tainted run starts tainted; one tainted on its own tells its parent
        runner = RoutedRunner(plan, recording=recording, parent_budget=budget, parent_taint=parent.ctx.services.taint)
        result = await _to_its_end(child, runner, parent.journal)
        summary = result.summary
        outcome = summary.get("outcome")
        if outcome == "final":
            return ChildResult(summary.get("final"), run_id)
        if outcome == "paused" or summary.get("status") in ("stopped", "interrupted"):
            raise ChildPaused(run_id, ident.call_key, summary.get("paused_by"))
        raise ChildFailed(outcome or summary.get("status") or "error",
                          f"child run {run_id} ended {outcome or summary.get('status')}", run_id)

    def _earlier_child(self, seq: int) -> dict | None:
        """The child run this call started in an earlier session of the parent (the parent is
        being resumed), unless the parent already took its outcome in a receipt and runs the call
        again on purpose (``--retry-failed``): then None, and the call starts a new child run."""
        store, parent = self.parent.store, self.parent
        found = store.child_run(parent.run_id, seq)
        if found is None:
            return None
        taken = any(r["seq"] == seq and r.get("child_run_id") == found["run_id"] for r in store.receipts_of(parent.run_id))
        return None if taken else found

    def _go_on(self, found: dict, call_key: str | None) -> tuple[str, Any]:
        """A child run that stopped (paused, interrupted): its id and what its journal holds. It is
        taken for this process first, so a ``resume CHILD_RUN_ID`` running elsewhere is never
        doubled: the parent pauses again instead."""
        from .resume import prepare_routed_journal

        store = self.parent.store
        if not store.acquire_lease(found["run_id"], self.parent.owner):
            raise ChildPaused(found["run_id"], call_key)
        return found["run_id"], prepare_routed_journal(store, found)


async def _to_its_end(child: RunSession, runner: Any, journal: Any) -> Any:
    """Run the child to its end, also when its parent's call is cancelled (the parent's loop
    ended: its time, a signal, an operator's abort, a halt): the child is then stopped as a signal
    would stop it, so its running call gets its receipt and the child its summary (``interrupted``:
    the parent's ``resume`` goes on with it), and only then does the cancellation go on."""
    result: list[Any] = []
    ended = trio.Event()

    async def shielded() -> None:
        with trio.CancelScope(shield=True):
            result.append(await child.run_child(runner, journal))
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(shielded)
        try:
            await ended.wait()
        except trio.Cancelled:
            child.state.stopped_by = CUT_SHORT
            child.state.interrupt()
            raise
    return result[0]


def _ended(found: dict) -> ChildResult:
    """A child run that finished before its parent went on: its answer, or its failure."""
    summary = found.get("summary") or {}
    outcome = summary.get("outcome")
    if found["status"] == "ok" and outcome == "final":
        return ChildResult(summary.get("final"), found["run_id"])
    kind = outcome or found["status"]
    raise ChildFailed(kind, f"child run {found['run_id']} ended {kind}", found["run_id"])


def install(session: RunSession, plans: dict[str, AdmittedPlan], max_depth: int | None = None) -> None:
    """Let the session's run call ``plan`` tools (a no-op when the plan has none). ``max_depth`` is
    the top plan's cap (default: its subagent's ``runner_defaults.max_depth``)."""
    if plans:
        session.child_contracts = {path: plan.contract for path, plan in plans.items()}
        if max_depth is None:
            sub = session.ctx.contract.subagents.get(session.ctx.config.subagent or "")
            max_depth = sub.max_depth if sub is not None else 0
        session.ctx.services.executors.install("plan", ChildPlanExecutor(session, plans, max_depth))  # type: ignore[union-attr]
