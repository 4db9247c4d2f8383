"""Rebuilding a run from the journal so ``resume`` can finish it.

What each call gets on resume, lane by lane and in order, is the table in ``rerun.py``
(shared with the routed runner); ``skipped`` runs again unless an earlier call of its lane still
stands as not ok, and once a call of a lane stands as not ok (or its envelope said stop), the calls after it that
  have no receipt are settled as ``skipped``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, Any

from .._canonical import sha256_of
from ..chain import refuse_unless_it_holds
from ..contract.registry import load_registry
from ..errors import ConfigError, RunError, UsageError
from ..lineage import top_run_of
from ..plan.admit import AdmittedCall, AdmittedLane, AdmittedPlan, admit_plan, load_plan
from ..receipts import Receipt
from ..store import Store, holder_pid, lease_token
from .call import not_run_receipt
from .context import RunContext
from .dispatch_order import dispatched_by_parent, walk_dispatched
from .rerun import IN_FLIGHT, resume_action, write_in_flight


def find_run(store: Store, run_id: str) -> dict:
    """The run with this id, or with this unique id prefix."""
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


@dataclass(frozen=True, slots=True)
class _Journaled:
    """A run's journal entry with its registry compiled again."""

    run_id: str
    opts: dict
    reg_path: str
    contract: Any
    sub: Any
    plan_path: str
    plan_file: str | None
    decl: Any
    contract_changed: bool = False


def _load_contract(run: dict, store: Store | None = None, accept_change: bool = False) -> _Journaled:
    """The run's registry, compiled again and checked against the journal's contract: a change to
    a tool with calls left to run refuses the resume (naming the tools) unless ``accept_change``."""
    run_id = run["run_id"]
    opts = run["options"] or {}
    reg_path = run["registry_path"]
    if not os.path.isfile(reg_path):
        raise _refuse(f"the run's registry {reg_path} no longer exists")
    contract, problems = load_registry(reg_path, default_timeout_s=opts.get("default_timeout_s"),
                                       app_root=opts.get("app_root"))
    if contract is None:
        raise ConfigError(problems)
    plan_path = run["plan_path"]
    plan_file = plan_path if not plan_path.startswith("<") and os.path.isfile(plan_path) else None
    decl = load_plan(plan_file)[0] if plan_file is not None else None
    sub_id = opts.get("subagent") or (decl.subagent if decl is not None else None)
    if sub_id is None or sub_id not in contract.subagents:
        raise _refuse(f"the run's subagent is unknown: the plan file {plan_path} is gone or changed")
    sub = contract.subagents[sub_id]
    changed = contract.contract_sha256 != run["contract_sha256"]
    if changed and not accept_change:
        _refuse_change(run, sub, store)
    return _Journaled(run_id, opts, reg_path, contract, sub, plan_path, plan_file, decl, changed)


def _refuse_change(run: dict, sub: Any, store: Store | None) -> None:
    """Refuse a changed registry when a tool that changed has calls left to run (a routed run, or
    a run journaled without its tools' hashes: any change)."""
    old = (run["options"] or {}).get("tool_hashes") or {}
    tools = {tid: t.contract_sha256 for tid, t in sub.tools.items()}
    differ = {t for t in set(old) | set(tools) if old.get(t) != tools.get(t)} if old else set(tools)
    left = _tools_left(store, run) if store is not None and run["mode"] != "routed" and old else None
    hit = sorted(differ if left is None else differ & left)
    if hit or not old:
        named = ", ".join(hit[:10]) if hit else "its tools"
        raise _refuse(f"the registry {run['registry_path']} changed since run {run['run_id']} started, for tools with"
                      f" calls left to run: {named}; resume with --accept-contract-change to go on under the new"
                      " contract")


def _tools_left(store: Store, run: dict) -> set[str]:
    """The tools of a batch run's calls that have no ok receipt yet."""
    done = {r["seq"] for r in store.receipts_of(run["run_id"]) if r["status"] == "ok"}
    return {tool for seq, _lane, _item, _ck, tool, _args, _sha in store.calls_of(run["run_id"]) if seq not in done}


class _Rebuilder:
    """Arguments and payloads the journal withheld (they held a redacted value), rebuilt from the
    plan file (and ``--lanes FILE`` given again), admitted again only when needed and only once
    (``--lanes -`` is a stream)."""

    def __init__(self, j: _Journaled, lanes: IO[bytes] | None, lanes_name: str):
        self.j, self.lanes, self.lanes_name = j, lanes, lanes_name
        self._plan: AdmittedPlan | None = None

    def _rebuilt(self) -> AdmittedPlan:
        if self._plan is None:
            j = self.j
            from ..contract.mcp import discovered

            self._plan = discovered(lambda servers: admit_plan(
                j.plan_file, registry=j.reg_path, app_root=j.opts.get("app_root"),  # type: ignore[arg-type]
                lanes=self.lanes, lanes_name=self.lanes_name, max_concurrency=j.opts.get("max_concurrency"),
                default_timeout_s=j.opts.get("default_timeout_s"), servers=servers))
        return self._plan

    def _possible(self, in_file: bool) -> bool:
        return self.j.plan_file is not None and (self.lanes is not None or in_file)

    def payload(self, index: int, item_key: str | None, withheld: str) -> dict | None:
        """The lane's payload rebuilt, or None when it cannot be; ConfigError if it differs."""
        decl = self.j.decl
        n_file = len(decl.lanes or []) if decl is not None and decl.mode == "parallel" else 0
        if not self._possible(index < n_file):
            return None
        found = next((ln for ln in self._rebuilt().lanes if ln.index == index), None)
        if found is None or found.payload is None:
            return None
        if sha256_of(found.payload) != withheld:
            raise _refuse(f"the payload of lane {index} ('{item_key}') rebuilt from the plan hashes differently"
                          " from the journal")
        return found.payload

    def args(self, seq: int, call_key: str, sha: str) -> dict | None:
        """The call's arguments rebuilt, or None when they cannot be; ConfigError if they differ."""
        if not self._possible(_seq_in_file(self.j.decl, seq)):
            return None
        found = next((c for c in self._rebuilt().calls if c.seq == seq), None)
        if found is None:
            return None
        if found.args_sha256 != sha:
            raise _refuse(f"call {seq} ('{call_key}') rebuilt from the plan hashes differently from the journal")
        return found.args


def _journaled_lanes(store: Store, j: _Journaled, rebuilder: _Rebuilder) -> tuple[list[AdmittedLane], set[int]]:
    """The run's lanes and calls as journaled (withheld values rebuilt where possible), and the
    seqs of calls whose withheld arguments or payload cannot be rebuilt."""
    lanes_out = []
    unrecoverable: set[int] = set()
    withheld_lanes: set[int] = set()
    for i, k, payload, withheld in store.lanes_of(j.run_id):
        if payload is None and withheld is not None:
            payload = rebuilder.payload(i, k, withheld)
            if payload is None:
                withheld_lanes.add(i)
        lanes_out.append(AdmittedLane(i, k, payload, []))
    if not lanes_out:
        lanes_out = [AdmittedLane(0, None, None, [])]
    for seq, lane, item, ck, tool_id, args, sha in store.calls_of(j.run_id):
        tool = j.sub.tools.get(tool_id)
        if tool is None:
            raise _refuse(f"tool '{tool_id}' of run {j.run_id} is no longer in the registry")
        if args is None and sha is not None:  # the journal never holds a redacted value
            args = rebuilder.args(seq, ck, sha)
            if args is None:
                unrecoverable.add(seq)
        elif args is None and lane in withheld_lanes:
            unrecoverable.add(seq)
        lanes_out[lane].calls.append(AdmittedCall(seq, lane, item, ck, tool, args, sha))
    return lanes_out, unrecoverable


class _Settler:
    """Walks the journaled lanes in order and settles what will not run again."""

    def __init__(self, ctx: RunContext, receipts: dict[int, dict], started: set[int], unrecoverable: set[int],
                 retry_failed: bool, retry_interrupted: bool):
        self.ctx, self.receipts, self.started, self.unrecoverable = ctx, receipts, started, unrecoverable
        self.retry_failed, self.retry_interrupted = retry_failed, retry_interrupted
        self.settled: list[Receipt] = []
        self.journaled: list[int] = []  # kept exactly as the journal holds them

    def _settle(self, c: AdmittedCall, status: str, message: str) -> None:
        self.settled.append(not_run_receipt(self.ctx, c.tool, c.args, seq=c.seq, item_key=c.item_key,
                                            call_key=c.call_key, status=status, message=message,
                                            args_sha256=c.args_sha256))

    def _keep(self, rec: dict) -> None:
        self.settled.append(Receipt.from_record(rec))
        self.journaled.append(rec["seq"])

    def lane(self, lane: AdmittedLane) -> None:
        stop: str | None = None  # why the rest of this lane does not run
        payload = dict(lane.payload) if lane.payload is not None else None
        for c in lane.calls:
            rec = self.receipts.get(c.seq)
            status = rec["status"] if rec else None
            in_flight_write = write_in_flight(status, c.seq in self.started, c.tool.at_most_once)
            if stop is not None:
                self._after_stop(c, rec, status, in_flight_write, stop)
                continue
            action = resume_action(status, in_flight_write=in_flight_write, retry_failed=self.retry_failed,
                                   retry_interrupted=self.retry_interrupted)
            if action == "keep":
                self._keep(rec)  # type: ignore[arg-type]
                stop = self._after_kept(c, rec, payload)  # type: ignore[arg-type]
            elif action == "interrupted":
                self._settle(c, "interrupted", IN_FLIGHT)
                stop = f"call '{c.call_key}' in this lane ended interrupted"
            elif c.seq in self.unrecoverable:
                self._settle(c, "interrupted", "its arguments held a redacted value and cannot be rebuilt from the plan;"
                                               " resume with the run's plan file (and --lanes FILE) in place")
                stop = f"call '{c.call_key}' in this lane ended interrupted"
        if payload is not None:
            lane.payload = payload  # what the calls that run again start from

    def _after_stop(self, c: AdmittedCall, rec: dict | None, status: str | None, in_flight_write: bool,
                    stop: str) -> None:
        if in_flight_write:  # its start was committed before an earlier receipt was
            self._settle(c, "interrupted", IN_FLIGHT)
        elif rec is not None and status != "cancelled":
            self._keep(rec)
        else:
            self._settle(c, "skipped", stop)

    @staticmethod
    def _after_kept(c: AdmittedCall, rec: dict, payload: dict | None) -> str | None:
        """Why the lane stops after a kept receipt (None: it goes on); an ok receipt's handoff
        extends the lane payload."""
        if rec["status"] != "ok":
            return f"call '{c.call_key}' in this lane ended {rec['status']}"
        env = rec.get("envelope")
        if not env:
            return None
        if payload is not None and env.get("handoff"):
            payload.update(env["handoff"])
        if env.get("decision") == "stop":
            return f"call '{c.call_key}' reported status '{env.get('status')}' (control envelope: stop)"
        return None


MCP_RUN = ("run {run_id} is the run of an MCP server (toolloop mcp serve): its calls came from its clients, so"
           " there is nothing to resume; start the server again for a new run")


def prepare_resume(
    store: Store,
    run: dict,
    *,
    retry_failed: bool,
    retry_interrupted: bool,
    owner: str,
    lanes: IO[bytes] | None = None,
    lanes_name: str = "-",
    accept_contract_change: bool = False,
) -> tuple[AdmittedPlan, dict]:
    """The plan to run again and what is already settled (for ``execute_plan(resume=...)``).

    Raises ConfigError (exit 3) when the run's hash chain does not hold, or the registry's
    contract or a rebuilt argument differs from the journal; nothing is written.
    """
    refuse_unless_it_holds(store, run, "resumed")
    if run["mode"] == "mcp":  # its calls came from the server's clients: no plan to go on with
        raise UsageError(MCP_RUN.format(run_id=run["run_id"]))
    if run["mode"] == "routed":
        return _prepare_routed(store, run, retry_failed=retry_failed, retry_interrupted=retry_interrupted,
                               owner=owner, accept_contract_change=accept_contract_change)
    j = _load_contract(run, store, accept_contract_change)
    child_plans: dict = {}
    if any(t.kind == "plan" for t in j.sub.tools.values()):  # the child plans its plan tools run
        import dataclasses

        from ..plan.children import admit_children

        from ..contract.mcp import discovered

        contract, sub, child_plans, problems = discovered(lambda servers: admit_children(
            j.contract, j.sub, usable=set(j.sub.allowed_tools), depth=0, max_depth=j.sub.max_depth, servers=servers))
        if problems:
            raise ConfigError(problems)
        j = dataclasses.replace(j, contract=contract, sub=sub)
    lanes_out, unrecoverable = _journaled_lanes(store, j, _Rebuilder(j, lanes, lanes_name))
    plan = AdmittedPlan(
        path=j.plan_path, decl=j.decl, contract=j.contract, subagent=j.sub, mode=run["mode"], lanes=lanes_out,
        max_concurrency=j.opts.get("max_concurrency") or 1, plan_sha256=run["plan_sha256"], registry_path=j.reg_path,
        child_plans=child_plans,
    )
    receipts = {r["seq"]: r for r in store.receipts_of(j.run_id)}
    ctx = RunContext(j.run_id, j.contract, parallel_batch_id=run["parallel_batch_id"])
    ctx.sequence.continue_from(1 + max((r["completion_seq"] for r in receipts.values()), default=-1))
    started = store.started_seqs(j.run_id)
    settler = _Settler(ctx, receipts, started, unrecoverable, retry_failed, retry_interrupted)
    for lane in plan.lanes:
        settler.lane(lane)
    children = _kept_children(receipts, {c.seq for c in plan.calls}, set(settler.journaled))
    return plan, {
        "owner": owner,
        "parallel_batch_id": run["parallel_batch_id"],
        "skip": [r.seq for r in settler.settled],
        "prior": settler.settled,
        "journaled": settler.journaled + [child.seq for _parent, child in children],
        "children": children,
        "completion_start": ctx.sequence.completed,
        "started": started,  # a write settled interrupted with its start committed may have happened
        "contract_changed": j.contract_changed,
    }


def admit_journaled(run: dict, j: _Journaled | None = None, store: Store | None = None) -> AdmittedPlan:
    """A routed run's plan admitted again from its file, which must be the one the run used. A
    child run's plan is admitted as the child it is (at its depth, under the top plan's
    ``max_depth``), with the context its journal holds."""
    j = j or _load_contract(run)
    if j.plan_file is None:
        raise _refuse(f"the run's plan file {j.plan_path} no longer exists; a routed run is read again from it")
    opts = j.opts
    child = opts.get("parent_run_id") is not None
    if child and opts.get("context_redacted"):
        pointers = ", ".join(opts["context_redacted"][:5])
        top = (top_run_of(store, run) if store is not None else None) or opts["parent_run_id"]
        raise _refuse(f"run {j.run_id} is a child run whose context held a redacted value (at {pointers}), which the"
                      f" journal does not keep: it cannot be resumed or replayed on its own; resume {top} instead,"
                      " which supplies the context again")
    from ..contract.mcp import discovered

    plan = discovered(lambda servers: admit_plan(
        j.plan_file, registry=j.reg_path, app_root=opts.get("app_root"), default_timeout_s=opts.get("default_timeout_s"),
        depth=int(opts.get("depth") or 0), max_depth=opts.get("max_depth"), servers=servers))
    if plan.plan_sha256 != run["plan_sha256"]:
        raise _refuse(f"the plan {j.plan_path} changed since run {j.run_id} started; it must be the same plan")
    if child or (opts.get("forked_from") is not None and "context" in opts):  # a fork of a child run too
        import dataclasses

        plan = dataclasses.replace(plan, routed=dataclasses.replace(plan.routed, context=opts.get("context") or {}))  # type: ignore[arg-type]
    return plan


def _prepare_routed(store: Store, run: dict, *, retry_failed: bool, retry_interrupted: bool,
                    owner: str, accept_contract_change: bool = False) -> tuple[AdmittedPlan, dict]:
    """A routed run is resumed by replaying its journal: the plan is admitted again from its file,
    recorded model answers are reused and settled receipts kept (``engine/routed.py``)."""
    j = _load_contract(run, store, accept_contract_change)
    plan = admit_journaled(run, j, store)
    recording = prepare_routed_journal(store, run, retry_failed=retry_failed, retry_interrupted=retry_interrupted)
    settled = {"owner": owner, "recording": recording, "contract_changed": j.contract_changed}
    if j.opts.get("parent_run_id") is not None:  # a child run resumed on its own stays its parent's child
        settled["child"] = {k: j.opts.get(k) for k in ("parent_run_id", "parent_receipt_id", "depth", "max_depth")}
    return plan, settled


def prepare_routed_journal(store: Store, run: dict, *, retry_failed: bool = False,
                           retry_interrupted: bool = False) -> Any:
    """What a routed run's journal holds, for the routed runner to replay when it goes on (a
    resumed run, or a child run its parent resumes)."""
    from .recording import Fork, Recording, recorded_starts, seconds_used

    run_id = run["run_id"]
    receipts = store.receipts_of(run_id)
    answers = store.model_answers_of(run_id)
    pauses = frozenset((rec["iteration"], rec["rule"]) for _before, rec in store.records_of(run_id)
                       if rec.get("type") == "supervisor" and rec.get("action") == "pause")
    return Recording(answers=answers, receipts={r["seq"]: r for r in receipts},
                     started=recorded_starts(store, run_id, receipts),
                     retry_failed=retry_failed, retry_interrupted=retry_interrupted,
                     seconds_used=seconds_used(receipts, answers), pauses=pauses,
                     fork=Fork.from_options(run["options"]))


def _kept_children(receipts: dict[int, dict], plan_seqs: set[int], kept: set[int]) -> list[tuple[int, Receipt]]:
    """Receipts of calls dispatched by kept receipts, in printed order
    (``dispatch_order``): ``(parent seq, receipt)``. They are printed again after their parent."""
    by_parent, _loose = dispatched_by_parent(receipts.values(), lambda r: r["seq"] in plan_seqs)
    return [(parent, Receipt.from_record(child)) for seq in sorted(kept)
            for parent, child in walk_dispatched(by_parent, seq, lambda r: r["seq"])]


def _seq_in_file(decl: Any, seq: int) -> bool:
    """Whether ``seq`` belongs to a call written in the plan file (not read from --lanes)."""
    if decl is None:
        return False
    if decl.mode == "sequential":
        return seq < len(decl.calls or [])
    return seq < sum(len(lane.calls) for lane in decl.lanes or [])


def owner_token() -> str:
    return lease_token()


def check_not_running(store: Store, run_id: str, owner: str) -> None:
    """Take the run's lease, or raise RunError naming the process that holds it."""
    if not store.acquire_lease(run_id, owner):
        holder = store.lease_owner(run_id)
        raise RunError(f"run {run_id} is already being run or resumed by process {holder_pid(holder)};"
                       " wait for it to finish (see 'toolloop runs list')")
