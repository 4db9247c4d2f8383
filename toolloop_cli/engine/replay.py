"""``toolloop replay``: a recorded routed run run again from its recorded model answers (no network,
no new spend), and what differs from the recording.

Read tools run again with the cache off (bypassed: a recorded cache hit is not a difference);
write and destructive tools take their recorded results unless
``execute_writes``; gated calls take their recorded answer; ``offline`` takes every tool result
from the recording, so prompts, guardrails and the engine are checked with no tool and no model.
"""

from __future__ import annotations

from typing import Any

from ..chain import refuse_unless_it_holds
from ..plan.admit import AdmittedPlan
from ..receipts import rfc3339
from ..store import Store
from .recording import Recording, recorded_starts

#: keys that differ between any two runs and are not compared; ``cache`` among them, since a
#: replay bypasses the cache (its receipts say ``off``): how the recording got a result, from the
#: cache or not, is not a difference
_VOLATILE = frozenset({"run_id", "receipt_id", "parent_receipt_id", "parallel_batch_id", "completion_seq",
                       "started_at", "finished_at", "duration_ms", "cache"})


def prepare_replay(store: Store, run: dict, *, offline: bool, execute_writes: bool) -> tuple[AdmittedPlan, Recording]:
    """The recorded run's plan, admitted again from its file, and its recording to replay."""
    from ..errors import UsageError
    from .resume import admit_journaled

    if run["mode"] != "routed":
        raise UsageError(f"run {run['run_id']} is a {run['mode']} run; replay re-runs routed runs")
    refuse_unless_it_holds(store, run, "replayed")
    plan = admit_journaled(run, store=store)
    receipts = store.receipts_of(run["run_id"])
    # the recording's writes that were in flight: their copies still count as made (``rerun.py``)
    recording = Recording(answers=store.model_answers_of(run["run_id"]), receipts={r["seq"]: r for r in receipts},
                          started=recorded_starts(store, run["run_id"], receipts), replay=True, offline=offline,
                          execute_writes=execute_writes,
                          pauses=_pauses_gone_past(store, run))
    return plan, recording


def _pauses_gone_past(store: Store, run: dict) -> frozenset:
    """``(iteration, rule)`` of the supervisor pauses the recorded run was resumed past: every one
    it journaled but the one it still stands paused at (its summary says a supervisor paused it),
    where the replay stops too."""
    pauses = [(r["iteration"], r["rule"]) for _before, r in store.records_of(run["run_id"])
              if r.get("type") == "supervisor" and r.get("action") == "pause"]
    summary = run.get("summary") or {}
    if pauses and summary.get("outcome") == "paused" and (summary.get("paused_by") or {}).get("kind") == "supervisor":
        pauses.pop()
    return frozenset(pauses)


def _refuse(message: str, file: str = "<journal>", hint: str = "") -> Exception:
    from ..contract.problems import Problem
    from ..errors import ConfigError

    return ConfigError([Problem("TL370", message, file, hint=hint or "fork from an earlier turn, or give a plan that"
                                                                     " still allows the recorded calls")])


def prepare_fork(store: Store, run: dict, turn: int, *, plan_file: str | None = None,
                 execute_writes: bool = False) -> tuple[AdmittedPlan, Recording]:
    """A fork of a recorded routed run from turn ``turn``: ``plan_file`` (default: the run's plan
    file as it is now) admitted as the run's plan was (a child run at its depth, with the context
    its journal holds), checked to still allow the recorded turns before ``turn``, and the
    recording of those turns. Raises UsageError (not a routed run, no such turn) or ConfigError
    (the chain does not hold, the plan is rejected or no longer admits the recorded turns)."""
    from ..errors import UsageError
    from .recording import Fork

    rid = run["run_id"]
    if run["mode"] != "routed":
        raise UsageError(f"run {rid} is a {run['mode']} run; replay --from forks routed runs")
    records = [rec for _before, rec in store.records_of(rid)]
    decisions = [rec for rec in records if rec.get("type") == "decision"]
    turns = max((int(d["iteration"]) for d in decisions), default=0)
    if not 1 <= turn <= turns:
        raise UsageError(f"run {rid} has {turns} turn(s); --from takes a turn from 1 to {turns}" if turns else
                         f"run {rid} has no recorded turn to fork from")
    refuse_unless_it_holds(store, run, "forked")
    plan = _admit_fork_plan(store, run, plan_file)
    _check_recorded_turns(plan, decisions, turn, plan_file or run["plan_path"])
    answers = store.model_answers_of(rid)
    routers = [i for i, a in enumerate(answers) if a.get("role") == "router"]
    before = answers[:routers[turn - 1]] if len(routers) >= turn else answers
    receipts = {r["seq"]: r for r in store.receipts_of(rid) if (r.get("iteration") or 0) < turn}
    # a supervisor pause the recording went past (resumed) before turn N does not stop the fork
    pauses = frozenset((r["iteration"], r["rule"]) for r in records if r.get("type") == "supervisor"
                       and r.get("action") == "pause" and (r.get("iteration") or 0) < turn)
    started = recorded_starts(store, rid, receipts.values()) & receipts.keys()
    recording = Recording(answers=before, receipts=receipts, started=started, replay=True, offline=True,
                          pauses=pauses, fork=Fork(rid, turn, execute_writes, _child_of(run)))
    return plan, recording


def _child_of(run: dict) -> dict | None:
    """What a fork of a child run keeps of the child: its context, depth and the top plan's cap."""
    opts = run["options"] or {}
    if opts.get("parent_run_id") is None:
        return None
    return {"context": opts.get("context") or {}, "depth": opts.get("depth"), "max_depth": opts.get("max_depth")}


def _admit_fork_plan(store: Store, run: dict, plan_file: str | None) -> AdmittedPlan:
    import dataclasses
    import os

    from ..contract.mcp import discovered
    from ..lineage import top_run_of
    from ..plan.admit import admit_plan

    opts = run["options"] or {}
    path = plan_file or run["plan_path"]
    if path.startswith("<") or not os.path.isfile(path):
        raise _refuse(f"the run's plan file {path} no longer exists; give the plan to fork with --plan FILE",
                      hint="pass --plan FILE")
    child = opts.get("parent_run_id") is not None
    if child and opts.get("context_redacted"):
        pointers = ", ".join(opts["context_redacted"][:5])
        top = top_run_of(store, run) or opts["parent_run_id"]
        raise _refuse(f"run {run['run_id']} is a child run whose context held a redacted value (at {pointers}),"
                      " which the journal does not keep: it cannot be forked on its own",
                      hint=f"fork {top}, the run that supplies the context")
    own = plan_file is None  # the run's own plan file: with the registry and App root the run used
    plan = discovered(lambda servers: admit_plan(
        path, registry=run["registry_path"] if own else None, app_root=opts.get("app_root") if own else None,
        default_timeout_s=opts.get("default_timeout_s"), depth=int(opts.get("depth") or 0),
        max_depth=opts.get("max_depth"), servers=servers))
    if plan.routed is None:
        raise _refuse(f"the plan {path} is a {plan.mode} plan; a routed run is forked with a routed plan", path,
                      hint="give a routed plan with --plan FILE")
    if child:
        plan = dataclasses.replace(plan, routed=dataclasses.replace(plan.routed, context=opts.get("context") or {}))
    return plan


def _check_recorded_turns(plan: AdmittedPlan, decisions: list[dict], turn: int, path: str) -> None:
    """Every turn before the fork must go as it was recorded under ``plan``: each call that ran
    names a tool the plan allows, with arguments its input schema takes; a call rejected as
    unknown or for its arguments is still rejected."""
    from .gates import input_problem

    assert plan.routed is not None
    allowed = plan.routed.tools
    problems = []
    for d in decisions:
        it = int(d["iteration"])
        if it >= turn or d.get("action") != "call":
            continue
        name = d.get("tool")
        tool = plan.subagent.tools.get(name) if name in allowed else None
        rejected = d.get("rejected")
        if rejected is None and tool is None:
            problems.append(f"turn {it} called '{name}', which the plan no longer allows")
        elif rejected is None and input_problem(tool, d.get("args"), skip_marked=True) is not None:
            problems.append(f"turn {it} called '{name}' with arguments its input schema no longer takes")
        elif rejected == "unknown_tool" and tool is not None:
            problems.append(f"turn {it} proposed '{name}', which the plan allows now")
        elif rejected == "invalid_args" and tool is not None and input_problem(
                tool, d.get("args"), skip_marked=True) is None:
            problems.append(f"turn {it} proposed arguments for '{name}' that its input schema takes now")
    if problems:
        raise _refuse(f"the plan {path} no longer admits the recorded turns before turn {turn}: "
                      + "; ".join(problems[:5]), path)


def exhausted_turn(summary: dict) -> int | None:
    """The turn at which a replayed run ran out of recorded answers (its summary's ``error`` says
    ``fixture exhausted at turn N``), or None when it did not."""
    import re

    error = summary.get("error")
    if not isinstance(error, dict) or error.get("kind") != "provider_error":
        return None
    found = re.search(r"\bfixture exhausted at turn (\d+)\b", str(error.get("message") or ""))
    return int(found.group(1)) if found else None


def _ignored(a: dict, b: dict) -> frozenset[str]:
    """What is not compared between a recorded record and its replay: the volatile keys, and for
    a call the recording took from the cache (no attempt made), its ``attempts`` too."""
    if "hit" in (a.get("cache"), b.get("cache")):
        return _VOLATILE | {"attempts"}
    return _VOLATILE


def _label(rec: dict) -> str:
    if rec.get("type") == "decision":
        return f"decision {rec.get('iteration')}"
    return f"receipt {rec.get('seq')} ({rec.get('tool')}, iteration {rec.get('iteration')})"


def differences(recorded: list[dict], replayed: list[dict]) -> list[str]:
    """Each decision or receipt of the replay that differs from the recording (times, ids and
    completion order aside), one line each; the summary's outcome and answer too."""
    def pick(records: list[dict]) -> list[dict]:
        return [r for r in records if r.get("type") in ("decision", "receipt")]

    old, new = pick(recorded), pick(replayed)
    out = []
    for i in range(max(len(old), len(new))):
        a = old[i] if i < len(old) else None
        b = new[i] if i < len(new) else None
        if a is None:
            out.append(f"{_label(b)}: not in the recording")  # type: ignore[arg-type]
        elif b is None:
            out.append(f"{_label(a)}: recorded, but the replay ended before it")
        else:
            ignored = _ignored(a, b)
            keys = sorted(k for k in set(a) | set(b) if k not in ignored and a.get(k) != b.get(k))
            if keys:
                out.append(f"{_label(a)}: differs in {', '.join(keys)}")
    old_sum = next((r for r in recorded if r.get("type") == "summary"), None)
    new_sum = next((r for r in replayed if r.get("type") == "summary"), None)
    if old_sum is not None and new_sum is not None:
        for key in ("outcome", "final", "route"):
            if old_sum.get(key) != new_sum.get(key):
                out.append(f"summary: {key} differs")
    return out


def credential_env(plan: AdmittedPlan) -> list[str]:
    """The environment variables a run of ``plan`` reads for credentials: its profiles' keys and
    its MCP servers' header and passed variables (journaled with the run for its export)."""
    names: set[str] = set()
    if plan.routed is not None:
        names.update(p.api_key_env for p in plan.routed.profiles().values() if p.api_key_env)
    for tool in plan.subagent.tools.values():
        decl = getattr(tool, "mcp", None)
        if decl is not None:
            names.update(decl.headers_env.values())
            names.update(decl.pass_env)
    return sorted(names)


def _pointer(path: tuple) -> str:
    return "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in path)


def _redacted_in(value: Any, path: tuple = ()) -> list[str]:
    """JSON Pointers of the values in ``value`` that a redaction replaced (the marker, whole or
    inside a text such as a model's reply)."""
    from .._secrets import REDACTED

    out: list[str] = []
    stack: list[tuple[tuple, Any]] = [(path, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((at + (k,), v[k]) for k in reversed(list(v)))
        elif isinstance(v, list):
            stack.extend((at + (i,), v[i]) for i in reversed(range(len(v))))
        elif isinstance(v, str) and REDACTED in v:
            out.append(_pointer(at))
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolloop-cli")
    except PackageNotFoundError:
        return "0+unknown"


def export_records(store: Store, run: dict) -> list[dict]:
    """What ``runs export`` writes: a ``manifest`` first (what a replay cannot reproduce from the
    file), then the run's model answers, then its records in printed order, summary last."""
    records = recorded_records(store, run)
    answers = store.model_answers_of(run["run_id"])
    body = answers + records
    redacted = [{"record": line, "pointer": pointer}
                for line, rec in enumerate(body, start=1) for pointer in _redacted_in(rec)]
    children = list(dict.fromkeys(r["child_run_id"] for r in records
                                  if r.get("type") == "receipt" and r.get("child_run_id")))
    manifest = {
        "type": "manifest", "run_id": run["run_id"], "toolloop_version": _version(), "plan": run["plan_path"],
        "contract_sha256": run["contract_sha256"],
        "counts": {"records": len(records), "model_answers": len(answers)},
        "not_captured": {"redacted": redacted, "child_runs": children,
                         "env": list((run["options"] or {}).get("credential_env") or [])},
    }
    # what an earlier attempt of a resumed routed run did past where the run went another way:
    # not the run's (no replay takes it), kept because a receipt records an effect that happened
    went_past = [{**m, "at": rfc3339(m["at"])} for m in store.went_past_of(run["run_id"])]
    if went_past:
        manifest["went_past"] = went_past
    # what each MCP tool's server offered when the run was admitted: a recorded test case is
    # admitted from it, with no server
    offered = _offered(store, run["run_id"], children)
    if offered:
        manifest["mcp_tools"] = offered
    return [manifest, *body]


def _offered(store: Store, run_id: str, children: list[str]) -> dict[str, Any]:
    """What each MCP tool's server offered ("subagent/tool" -> offer) when the run and each child
    run under it (a ``plan:`` tool's, at any depth) were admitted, from their contract snapshots
    (which keep the offers of child plans the run never called too): a recorded case admits its
    child plans from them. A name two of these registries give
    different offers is left out (its server is listed again rather than admitted from a guess)."""
    offered: dict[str, Any] = {}
    clashes: set[str] = set()
    todo, seen = [run_id, *children], set()
    while todo:
        rid = todo.pop(0)
        if rid in seen:
            continue
        seen.add(rid)
        snapshot = store.contract_of(rid) or {}
        found = [(name, t.get("offered")) for name, t in (snapshot.get("mcp_tools") or {}).items()
                 if isinstance(t, dict)]
        # the child plans it could run, called or not (a case admits every one of them)
        found += [pair for child in (snapshot.get("child_mcp_tools") or {}).values() for pair in child.items()]
        for name, offer in found:
            if isinstance(offer, dict) and offered.setdefault(name, offer) != offer:
                clashes.add(name)
        if rid != run_id:  # the top run's children are known already
            todo.extend(r["child_run_id"] for r in store.receipts_of(rid) if r.get("child_run_id"))
    return {name: o for name, o in offered.items() if name not in clashes}


def recorded_records(store: Store, run: dict) -> list[dict]:
    """The recorded run's records in the order it printed them, summary last."""
    from .history import in_output_order, with_other_records

    records: list[Any] = with_other_records(in_output_order(store.receipts_of(run["run_id"]), run["total_calls"]),
                                            store.records_of(run["run_id"]))
    if run.get("summary"):
        records.append(run["summary"])
    return records
