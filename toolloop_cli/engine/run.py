"""A whole run: the lanes runner (sequential and parallel plans) or the routed runner on a run
session (``session.py``).

``execute_plan`` is the entry point ``run``, ``resume`` and ``call`` use: it journals the admitted
plan (or reopens a resumed run) and runs its lanes, settled through the session's journal.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any

import trio

from ..plan.admit import AdmittedPlan
from ..store import lease_token
from .handle import RunHandle
from .redact import without_run_secrets
from .lanes import run_lanes
from .replay import credential_env
from .rerun import counts_as_made
from .session import Emit, RunnerEnd, RunOptions, RunResult, RunSession, new_run_id
from .spool import lane_rows

__all__ = ["RunOptions", "RunResult", "execute_plan", "journal_plan"]


def _plan_path(plan: AdmittedPlan) -> str:
    """The plan's path as the journal keeps it (absolute; ``<call ...>`` for an ad-hoc call)."""
    return plan.path if plan.path.startswith("<") else os.path.abspath(plan.path)


def journal_plan(session: RunSession, plan: AdmittedPlan) -> None:
    """Record the run (holding its lease) and every admitted lane and call."""
    ctx = session.ctx
    plan_path = _plan_path(plan)
    session.store.create_run({
        "run_id": ctx.run_id, "mode": plan.mode, "plan_path": plan_path,
        "plan_sha256": plan.plan_sha256, "registry_path": os.path.abspath(plan.registry_path),
        "contract_sha256": plan.contract.contract_sha256,
        "options": {"max_concurrency": plan.max_concurrency, "subagent": plan.subagent.id,
                    "app_root": plan.contract.app_root, **session.options.journal_form(),
                    "tool_hashes": {tid: t.contract_sha256 for tid, t in plan.subagent.tools.items()},
                    "credential_env": credential_env(plan)},
        "parallel_batch_id": ctx.config.parallel_batch_id, "total_calls": plan.total_calls,
        "lease_owner": session.owner,
    })
    # lanes from a stream are in the journal already (spool.py); these are the plan file's,
    # without a run secret written in them
    session.store.journal_calls(ctx.run_id, *without_run_secrets(ctx.services.secrets, *lane_rows(plan.lanes)))


class LanesRunner:
    """Runs an admitted sequential or parallel plan (or what a resume left of one)."""

    def __init__(self, plan: AdmittedPlan, resume: dict | None = None):
        self.plan = plan
        self.resume = resume

    def begin(self, session: RunSession) -> None:
        plan, resume, ctx = self.plan, self.resume, session.ctx
        if resume is None:
            if plan.mode == "parallel":
                ctx.config.parallel_batch_id = uuid.uuid4().hex
            journal_plan(session, plan)
            if plan.stream is not None:
                from .spool import LaneSpool

                plan.stream.journal_to(LaneSpool(session.store, ctx.run_id, grow_total=True, keep_calls=0,
                                                  secrets=ctx.services.secrets))
            return
        ctx.config.parallel_batch_id = resume["parallel_batch_id"]
        for parent_seq, child in resume.get("children", ()):
            ctx.children.add(parent_seq, child)  # printed again right after its kept parent
        # the calls kept from earlier sessions that ran (or, a write in flight, may have) count
        # toward their tool's max_calls, as they did in the session that made them (a dispatched
        # call is checked against it)
        started = resume.get("started", ())
        for kept in [*resume["prior"], *(child for _parent, child in resume.get("children", ()))]:
            tool = plan.subagent.tools.get(kept.tool)
            if tool is not None and counts_as_made(kept, started):
                ctx.ledger.count(tool)
        ctx.sequence.continue_from(resume.get("completion_start", 0))
        session.store.reopen_run(ctx.run_id)
        if resume.get("contract_changed"):
            session.store.set_contract(ctx.run_id, plan.contract.contract_sha256)

    async def __call__(self, run: RunHandle) -> RunnerEnd:
        plan, resume = self.plan, self.resume
        settlement = run.settlement
        skip: frozenset[int] = frozenset()
        prior: list = []
        if resume is not None:
            skip, prior = frozenset(resume["skip"]), resume["prior"]
            settlement.journaled(resume.get("journaled", ()))
        lanes = plan.all_lanes() if plan.spool is not None and resume is None else plan.lanes
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_for_abort, run)
            state = await run_lanes(
                run.ctx, lanes, plan.max_concurrency if plan.mode == "parallel" else 1, settlement,
                halt=run.halt, skip_seqs=skip, prior=prior, state=run.state,
                stream=plan.stream if resume is None else None, on_rejected=run.on_rejected)
            nursery.cancel_scope.cancel()
        summary: dict = {}
        failed = None
        if plan.stream is not None and resume is None:
            run.set_total_calls(state.total)  # rejected lanes' calls included
            summary["rejected_lanes"] = state.rejected_lanes
            if state.rejected_lanes and not (state.halted or state.paused or state.interrupted):
                failed = "failed"  # a lane that was not admitted is a failure of the run
        if resume is not None and resume.get("contract_changed"):
            summary["contract_changed"] = True
        return RunnerEnd(stopped=state.halted or bool(state.paused), status=failed, summary=summary)


#: how often a running batch looks for an operator's abort in the journal
CONTROL_POLL_S = 0.2


async def _watch_for_abort(run: RunHandle) -> None:
    """An operator's ``toolloop abort`` stops the batch as ``--halt now`` would (resumable)."""
    seen = 0
    while True:
        for n, kind, message, consumed in run.controls_after(seen):
            seen = n + 1
            if consumed is not None:
                continue  # an earlier session of the run stopped for it; resume goes on
            if not run.control_holds(n, kind):
                continue
            run.consume_control(n, 0)
            if kind == "abort":
                why = f"aborted by an operator{': ' + message if message else ''}"
                run.record({"type": "supervisor", "run_id": run.run_id,
                            "iteration": 0, "rule": "operator", "action": "abort", "reason": why})
                run.state.stop_now(why)
                return
        await trio.sleep(CONTROL_POLL_S)


def execute_plan(plan: AdmittedPlan, store: Any, emit: Emit, options: RunOptions, *, run_id: str | None = None,
                 resume: dict | None = None, replay: Any = None, runner: Any = None) -> RunResult:
    """Run an admitted plan to its end (or interruption). Every receipt is committed to the
    journal before ``emit`` sees it; the summary is emitted last.

    ``store`` is a ``Store`` or anything with the same methods. ``resume`` (from
    ``prepare_resume``) carries the receipts already settled, the lease owner, and where
    ``completion_seq`` goes on. ``replay`` (from ``replay.prepare_replay``) runs a recorded routed
    run again as this new run. ``runner`` runs the plan instead of its mode's runner (an MCP
    server's run, whose calls arrive while it runs).
    """
    if replay is not None:  # a replay runs the tools again with the cache off: never a hit, never stored
        options = dataclasses.replace(options, no_cache=True, refresh_cache=False)
    from .notify import notify_target

    session = RunSession(store, emit, options, run_id=run_id or new_run_id(), contract=plan.contract,
                         mode=plan.mode, subagent=plan.subagent.id, total_calls=plan.total_calls,
                         owner=resume["owner"] if resume is not None else lease_token(),
                         notify=notify_target(plan), plan=_plan_path(plan))
    child = resume.get("child") if resume is not None else None
    if child is not None:  # a child run resumed on its own (its summary still names its parent)
        session.parent, session.depth = (child["parent_run_id"], child["parent_receipt_id"]), int(child["depth"] or 1)
    child_plans = getattr(plan, "child_plans", None)
    if child_plans:
        from .child_plans import install

        install(session, child_plans, child.get("max_depth") if child is not None else None)
    if runner is not None:
        return session.run(runner)
    if plan.mode == "routed":
        from .routed import RoutedRunner

        recording = replay if replay is not None else resume["recording"] if resume is not None else None
        return session.run(RoutedRunner(plan, recording=recording,
                                        contract_changed=bool(resume and resume.get("contract_changed"))))
    return session.run(LanesRunner(plan, resume))
