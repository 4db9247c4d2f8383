"""Rebuilding an interrupted run from the journal so ``resume`` can finish it (SPEC 7)."""

from __future__ import annotations

import os
import uuid
from typing import Any, IO

from ..contract.registry import load_registry
from ..errors import ConfigError, RunError, UsageError
from ..plan.admit import AdmittedCall, AdmittedLane, AdmittedPlan, admit_plan
from ..receipts import FAILED_STATUSES, Receipt
from ..store import Store
from .call import RunContext, not_run_receipt


def find_run(store: Store, run_id: str) -> dict:
    run = store.get_run(run_id)
    if run is None:
        matches = store.find_runs(run_id)
        if len(matches) == 1:
            run = store.get_run(matches[0])
        elif len(matches) > 1:
            raise UsageError(f"run id '{run_id}' is ambiguous: {', '.join(matches[:5])}")
    if run is None:
        raise UsageError(f"no run '{run_id}' in {store.path} (see 'toolloop runs list')")
    return run


def _refuse(message: str) -> ConfigError:
    from ..contract.problems import Problem

    return ConfigError([Problem("TL370", message, "<journal>", hint="run the plan again as a new run")])


def prepare_resume(
    store: Store,
    run: dict,
    *,
    retry_failed: bool,
    retry_interrupted: bool,
    lanes: IO[bytes] | None = None,
    lanes_name: str = "-",
) -> tuple[AdmittedPlan, dict]:
    """The plan to run again and what is already settled. Raises ConfigError (exit 3) when the
    registry or the rebuilt arguments differ from the journal."""
    run_id = run["run_id"]
    reg_path = run["registry_path"]
    if not os.path.isfile(reg_path):
        raise _refuse(f"the run's registry {reg_path} no longer exists")
    contract, problems = load_registry(reg_path, default_timeout_s=(run["options"] or {}).get("default_timeout_s"))
    if contract is None:
        raise ConfigError(problems)
    if contract.contract_sha256 != run["contract_sha256"]:
        raise _refuse(
            f"the registry {reg_path} changed since run {run_id} started (contract hash "
            f"{contract.contract_sha256[:12]} != {run['contract_sha256'][:12]}); resume needs the same contract"
        )
    from ..plan.admit import load_plan

    decl, col = load_plan(run["plan_path"]) if os.path.isfile(run["plan_path"]) else (None, None)
    sub_id = decl.subagent if decl is not None else None
    calls_rows = list(store.calls_of(run_id))
    # the subagent is the one every journaled call's tool belongs to
    if sub_id is None or sub_id not in contract.subagents:
        raise _refuse(f"the plan file {run['plan_path']} is gone or changed its subagent")
    sub = contract.subagents[sub_id]
    rebuilt: dict[int, AdmittedCall] | None = None

    def rebuild() -> dict[int, AdmittedCall]:
        nonlocal rebuilt
        if rebuilt is None:
            try:
                again = admit_plan(run["plan_path"], registry=reg_path, lanes=lanes, lanes_name=lanes_name,
                                   max_concurrency=run["options"].get("max_concurrency"))
            except ConfigError as exc:
                raise ConfigError(exc.problems) from None
            rebuilt = {c.seq: c for c in again.calls}
        return rebuilt

    lanes_rows = store.lanes_of(run_id)
    lanes_out = [AdmittedLane(i, k, p, []) for i, k, p in lanes_rows]
    if not lanes_out:
        lanes_out = [AdmittedLane(0, None, None, [])]
    unrecoverable: set[int] = set()
    for seq, lane, item, ck, tool_id, args, sha in calls_rows:
        tool = sub.tools.get(tool_id)
        if tool is None:
            raise _refuse(f"tool '{tool_id}' of run {run_id} is no longer in the registry")
        if args is None and sha is not None:
            found = rebuild().get(seq) if (lanes is not None or _seq_in_file(decl, seq)) else None
            if found is None:
                unrecoverable.add(seq)
            elif found.args_sha256 != sha:
                raise _refuse(f"call {seq} ('{ck}') rebuilt from the plan hashes differently from the journal")
            else:
                args = found.args
        lanes_out[lane].calls.append(AdmittedCall(seq, lane, item, ck, tool, args, sha))
    plan = AdmittedPlan(
        path=run["plan_path"], decl=decl, contract=contract, subagent=sub, mode=run["mode"], lanes=lanes_out,
        max_concurrency=run["options"].get("max_concurrency") or 1, plan_sha256=run["plan_sha256"],
        registry_path=reg_path,
    )
    receipts = {r["seq"]: r for r in store.receipts_of(run_id)}
    started = store.started_seqs(run_id)
    ctx = RunContext(run_id=run_id, contract=contract, parallel_batch_id=run["parallel_batch_id"])
    ctx._completion = 1 + max((r["completion_seq"] for r in receipts.values()), default=-1)
    keep: list[Receipt] = []
    new: list[Receipt] = []
    for lane in plan.lanes:
        lane_failed = False
        for c in lane.calls:
            rec = receipts.get(c.seq)
            at_most_once = c.tool.effect in ("write", "destructive") and not c.tool.idempotent
            status = rec["status"] if rec else None
            rerun = False
            if status == "ok":
                keep.append(Receipt.from_record(rec))
                continue
            if status in FAILED_STATUSES or status == "invalid_input":
                rerun = retry_failed
            elif status == "interrupted":
                rerun = retry_interrupted
            elif status == "skipped":
                rerun = not lane_failed
            elif status == "cancelled" or status is None:
                if at_most_once and (status == "cancelled" or c.seq in started) and not retry_interrupted:
                    r = not_run_receipt(ctx, c.tool, c.args, seq=c.seq, item_key=c.item_key, call_key=c.call_key,
                                        status="interrupted", args_sha256=c.args_sha256,
                                        message="this write was in flight when the run stopped; "
                                                "rerun it on purpose with --retry-interrupted")
                    new.append(r)
                    lane_failed = True
                    continue
                rerun = True
            if c.seq in unrecoverable and rerun:
                r = not_run_receipt(ctx, c.tool, None, seq=c.seq, item_key=c.item_key, call_key=c.call_key,
                                    status="interrupted", args_sha256=c.args_sha256,
                                    message="its arguments held a redacted value and cannot be rebuilt; "
                                            "give the same --lanes FILE again")
                new.append(r)
                lane_failed = True
                continue
            if rerun:
                continue
            keep.append(Receipt.from_record(rec))  # type: ignore[arg-type]
            lane_failed = True
    if new:
        store.put_receipts([r.as_record() for r in new])
    settled = keep + new
    return plan, {
        "parallel_batch_id": run["parallel_batch_id"],
        "skip": [r.seq for r in settled],
        "prior": settled,
        "completion_start": ctx._completion,
    }


def _seq_in_file(decl: Any, seq: int) -> bool:
    """Whether ``seq`` belongs to a call written in the plan file (not read from --lanes)."""
    if decl is None:
        return False
    if decl.mode == "sequential":
        return seq < len(decl.calls or [])
    return seq < sum(len(lane.calls) for lane in decl.lanes or [])


def owner_token() -> str:
    return f"{os.getpid()}:{uuid.uuid4().hex[:12]}"


def check_not_running(store: Store, run_id: str, owner: str) -> None:
    if not store.acquire_lease(run_id, owner):
        holder = store.lease_owner(run_id) or "another process"
        raise RunError(f"run {run_id} is being run or resumed by process {holder.split(':')[0]}; "
                       "wait for it to finish")
