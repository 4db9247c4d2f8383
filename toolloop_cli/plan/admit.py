"""Whole-plan admission: every problem at once, before anything runs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path as FsPath
from typing import IO, TYPE_CHECKING, Any, Iterable

from .._canonical import sha256_of
from .._json import value_problem
from .._paths import Looked, look_at
from .._text import excerpt, listing, quoted
from ..contract.compiled import Contract, SubagentSpec, ToolSpec
from ..contract.problems import Collector, Problem, did_you_mean, not_a
from ..contract.registry import display_path, load_document, load_registry
from ..contract.schemas import schema_errors
from ..contract.quick import MODE_KEYS, PLAN, read
from ..errors import ConfigError

if TYPE_CHECKING:  # the declaration models load only where a plan is not plainly well formed
    from .lanes import LaneStream
    from .models import LaneDecl, PlanDecl

#: a lane payload that was refused (reported once, at the payload); calls it would feed are left out
_UNUSABLE: Any = {}

@dataclass(slots=True)
class AdmittedCall:
    seq: int
    lane: int
    item_key: str | None
    call_key: str
    tool: ToolSpec
    args: dict | None  # None: fed from the lane payload when the call starts
    args_sha256: str | None


@dataclass(slots=True)
class AdmittedLane:
    index: int
    item_key: str | None
    payload: dict | None
    calls: list[AdmittedCall]


@dataclass
class AdmittedPlan:
    """A plan checked against its contract, ready to run."""

    path: str
    decl: PlanDecl
    contract: Contract
    subagent: SubagentSpec
    mode: str
    lanes: list[AdmittedLane]
    max_concurrency: int
    plan_sha256: str
    registry_path: str
    warnings: list[Problem] = field(default_factory=list)
    #: lanes read from a stream and journaled as admitted (``engine.spool.LaneSpool``); they
    #: follow ``lanes`` and are read back when they run
    spool: Any = None
    #: lanes still to be read and admitted one at a time as the run goes (``run --stream``)
    stream: LaneStream | None = None
    #: a routed plan's goal, profiles, budgets, prompts and supervisor, read and checked
    routed: RoutedSpec | None = None
    #: the child plans its ``plan:`` tools run (and theirs), by absolute path
    child_plans: dict = field(default_factory=dict)

    def all_lanes(self) -> Iterable[AdmittedLane]:
        yield from self.lanes
        if self.spool is not None:
            yield from self.spool.iter_lanes(self.subagent)

    @property
    def calls(self) -> Iterable[AdmittedCall]:
        for lane in self.all_lanes():
            yield from lane.calls

    @property
    def total_calls(self) -> int:
        return sum(len(lane.calls) for lane in self.lanes) + (self.spool.calls if self.spool is not None else 0)

    @property
    def lane_count(self) -> int:
        return len(self.lanes) + (self.spool.lanes if self.spool is not None else 0)


def load_plan(path: str | os.PathLike) -> tuple[PlanDecl | None, Collector]:
    """Parse a plan file into its declaration; problems go to the returned collector."""
    doc = load_document(path)
    col = doc.collector
    if doc.data is None:
        return None, col
    if "subagents" in doc.data and "mode" not in doc.data:
        col.add("TL106", "this file is a registry, not a plan", (),
                "pass a plan (see plans/ for examples); it names its registry with 'registry:'")
        return None, col
    if not_a("plan", doc.data, col, PLAN.names, "pass a plan: a YAML file with 'version: 1', 'registry:', 'subagent:'"
             " and 'mode:' (see plans/ for examples)"):
        return None, col
    mode = doc.data.get("mode")
    if isinstance(mode, str) and mode in MODE_KEYS:
        for other, keys in MODE_KEYS.items():
            for key in sorted(keys - MODE_KEYS[mode]):
                if other != mode and key in doc.data:
                    col.add("TL205", f"{quoted(key)} is not used in {mode} mode", (key,),
                            f"remove it, or set mode: {other}", at_key=True)
    decl: Any = read(PLAN, doc.data)
    if decl is None:
        from pydantic import ValidationError

        from ..contract.validation import report_model_errors
        from .models import PlanDecl

        try:
            decl = PlanDecl.model_validate(doc.data)
        except ValidationError as exc:
            report_model_errors(exc, PlanDecl, col, data=doc.data)
            return None, col
    if col.has_errors:
        return None, col
    return decl, col


def registry_path_for(plan_path: str | os.PathLike, decl: PlanDecl, override: str | None) -> str | None:
    if override is not None:
        return override
    if decl.registry is None:
        return None
    return str((FsPath(plan_path).parent / decl.registry))


def registry_missing(reg_path: str, looked: Looked) -> str:
    """The TL412 message for a registry path that names no file."""
    if looked.kind == "bad":
        return f"registry {excerpt(reg_path)} cannot be read: {looked.why}"
    if looked.kind == "folder":
        return f"registry {excerpt(reg_path)} is a folder, not a file"
    return f"registry not found: {excerpt(reg_path)}"


class _Admitter:
    def __init__(self, contract: Contract, sub: SubagentSpec, col: Collector):
        self.contract = contract
        self.sub = sub
        self.col = col
        self.seq = 0
        self.item_keys: dict[str, int] = {}
        self.per_tool: dict[str, int] = {}
        self.lanes: list[AdmittedLane] = []
        self.lane_count = 0  # lanes admitted, including those handed to a spool
        self.extra: list[Problem] = []

    def call(self, lane: int, item_key: str | None, index: int, decl: Any, at: tuple,
             keys: dict[str, int], payload: dict | None, fed_later: bool, col: Collector) -> AdmittedCall | None:
        call_key = decl.call_key if decl.call_key is not None else str(index)
        tool_id = decl.tool
        tool = self.sub.tools.get(tool_id)
        if tool is not None and call_key not in keys and tool_id in self.sub.allowed_tools:
            keys[call_key] = index  # the common case: none of the three checks below has a finding
            ok = True
        else:
            ok = self._unique_key(call_key, index, item_key, decl, at, keys, col)
            tool = self._tool(decl, at, col)
            if tool is None:
                return None
            ok = self._allowed(decl, at, col) and ok
        self.per_tool[tool_id] = self.per_tool.get(tool_id, 0) + 1
        if decl.args is None and payload is not None:
            if payload is _UNUSABLE:
                return None  # reported once, at the payload
            if fed_later:
                return AdmittedCall(self.seq, lane, item_key, call_key, tool, None, None) if ok else None
            args = project_payload(tool, payload)
        elif decl.args is None:
            args = {}
        elif (why := value_problem(decl.args)) is not None:
            col.add("TL404", f"arguments for {quoted(decl.tool)} cannot be used: {why}", at + ("args",),
                    "pass plain JSON arguments nested at most a few levels")
            return None
        else:
            args = decl.args
        validator = tool.input_validator
        if validator is not None and not validator.is_valid(args):
            ok = self._valid_input(tool, decl, args, at, payload is not None, col) and ok
        if not ok:
            return None
        return AdmittedCall(self.seq, lane, item_key, call_key, tool, args, sha256_of(args))

    @staticmethod
    def _unique_key(call_key: str, index: int, item_key: str | None, decl: Any, at: tuple, keys: dict[str, int],
                    col: Collector) -> bool:
        """TL406 for a call_key already used in this lane (or plan)."""
        if call_key in keys:
            where = "this lane" if item_key is not None else "this plan"
            col.add("TL406", f"duplicate call_key {quoted(call_key)} in {where} (first at call {keys[call_key]})",
                    at + ("call_key",) if decl.call_key is not None else at, "give each call its own call_key")
            return False
        keys[call_key] = index
        return True

    def _tool(self, decl: Any, at: tuple, col: Collector) -> ToolSpec | None:
        """The called tool of the subagent (TL402 when it has none of that name)."""
        tool = self.sub.tools.get(decl.tool)
        if tool is None:
            near = did_you_mean(decl.tool, self.sub.tools)
            col.add("TL402", f"unknown tool {quoted(decl.tool)} in subagent {quoted(self.sub.id)}", at + ("tool",),
                    f"did you mean {quoted(near)}?" if near else f"known tools: {listing(sorted(self.sub.tools))}")
        return tool

    def _allowed(self, decl: Any, at: tuple, col: Collector) -> bool:
        """TL403 for a tool outside the subagent's allowlist."""
        if decl.tool in self.sub.allowed_tools:
            return True
        col.add("TL403", f"tool {quoted(decl.tool)} is not in runner_defaults.allowed_tools of {quoted(self.sub.id)}",
                at + ("tool",), "add it to allowed_tools in the registry, or call another tool")
        return False

    @staticmethod
    def _valid_input(tool: ToolSpec, decl: Any, args: Any, at: tuple, has_payload: bool, col: Collector) -> bool:
        """TL404 (or TL413 for arguments fed from the lane payload) for arguments its input
        schema refuses."""
        if tool.input_validator is None or tool.input_validator.is_valid(args):
            return True
        for msg in schema_errors(tool.input_validator, args, limit=5):
            if decl.args is None and has_payload:
                col.add("TL413", f"the lane payload cannot feed {quoted(decl.tool)}: {msg}", at,
                        "fix the lane's payload, or give this call explicit args")
            else:
                col.add("TL404", f"arguments for {quoted(decl.tool)} fail its input_schema: {msg}",
                        at + ("args",) if decl.args is not None else at,
                        "pass exactly the arguments the schema declares")
        return False

    def lane(self, decl: LaneDecl, at: tuple, col: Collector) -> None:
        index = self.lane_count
        self.lane_count += 1
        # one look-up: the key's first lane, this one when it is new (no key holds this index:
        # a withdrawn lane's index goes back with its key)
        first = self.item_keys.setdefault(decl.item_key, index)
        if first != index:
            col.add("TL405", f"duplicate item_key {quoted(decl.item_key)} (first in lane {first})",
                    at + ("item_key",), "item keys must be unique across the plan")
        keys: dict[str, int] = {}
        calls = []
        fed_later = False
        payload: Any = decl.payload
        if payload is not None and (why := value_problem(payload)) is not None:
            col.add("TL413", f"the lane payload cannot be used: {why}", at + ("payload",),
                    "send a plain JSON payload nested at most a few levels")
            payload = _UNUSABLE
        for i, c in enumerate(decl.calls):
            admitted = self.call(index, decl.item_key, i, c, at + ("calls", i), keys, payload, fed_later, col)
            self.seq += 1
            if admitted is not None:
                calls.append(admitted)
                if admitted.tool.envelope is not None and admitted.tool.envelope.handoff_fields:
                    fed_later = True
        self.lanes.append(AdmittedLane(index, decl.item_key, None if payload is _UNUSABLE else payload, calls))

    def lane_limits(self, decl: LaneDecl, col: Collector) -> None:
        """TL407 and TL408 for a streamed lane that takes the run past a call limit."""
        sub, n = self.sub, self.seq
        if sub.max_calls is not None and n > sub.max_calls:
            col.add("TL407", f"this lane takes the run to {n} calls; subagent {quoted(sub.id)} allows {sub.max_calls}",
                    hint="split the input or raise runner_defaults.max_calls")
        for c in decl.calls:
            tool = sub.tools.get(c.tool)
            if tool is not None and tool.max_calls is not None and self.per_tool.get(c.tool, 0) > tool.max_calls:
                col.add("TL408", f"this lane takes {quoted(c.tool)} past its max_calls of {tool.max_calls}",
                        hint="reduce the calls to this tool or raise its max_calls")

    def withdraw(self, decl: LaneDecl, lane: AdmittedLane) -> None:
        """A streamed lane rejected after it was counted: it gives back its lane index, its tools'
        counts and its item key (its seqs stay taken: its receipts say why it did not run)."""
        self.lane_count -= 1
        for c in decl.calls:
            self.per_tool[c.tool] = self.per_tool.get(c.tool, 1) - 1
        if self.item_keys.get(decl.item_key) == lane.index:
            del self.item_keys[decl.item_key]

    def limits(self, at: tuple) -> None:
        total = self.seq
        if self.sub.max_calls is not None and total > self.sub.max_calls:
            self.col.add("TL407", f"the plan makes {total} calls; subagent {quoted(self.sub.id)} allows {self.sub.max_calls}",
                         at, "split the plan or raise runner_defaults.max_calls", at_key=True)
        for tid, n in sorted(self.per_tool.items()):
            tool = self.sub.tools.get(tid)
            if tool is not None and tool.max_calls is not None and n > tool.max_calls:
                self.col.add("TL408", f"the plan calls {quoted(tid)} {n} times; its max_calls is {tool.max_calls}",
                             at, "reduce the calls to this tool or raise its max_calls", at_key=True)


def _usable_tools(decl: PlanDecl, sub: SubagentSpec, more_lanes: bool) -> set[str]:
    """The tools a plan may call: a routed plan's allowlist, the tools its calls and lanes name, or
    every allowed tool when lanes come from --lanes."""
    if decl.mode == "routed":
        return set(decl.allowed_tools or sub.allowed_tools)
    if more_lanes:
        return set(sub.allowed_tools)
    if decl.mode == "sequential":
        return {c.tool for c in decl.calls or []}
    return {c.tool for lane in decl.lanes or [] for c in lane.calls}


def _refuse_sandboxes(decl: PlanDecl, sub: SubagentSpec, adm: _Admitter, col: Collector, placement: str,
                      more_lanes: bool) -> None:
    """TL423 for each sandboxed tool the plan may call whose sandbox cannot be made (5.11), at
    its first call in the plan (or the plan's top for routed plans and streamed lanes)."""
    from ..contract.isolation import refusal

    used = _usable_tools(decl, sub, True) if more_lanes else set(adm.per_tool)
    for tid in sorted(used):
        tool = sub.tools.get(tid)
        why = refusal(tool, placement) if tool is not None else None
        if why is not None:
            col.add("TL423", why[0], _first_call(decl, tid), why[1])


def _first_call(decl: PlanDecl, tid: str) -> tuple:
    for i, c in enumerate(decl.calls or []):
        if c.tool == tid:
            return ("calls", i, "tool")
    for i, lane in enumerate(decl.lanes or []):
        for j, c in enumerate(lane.calls):
            if c.tool == tid:
                return ("lanes", i, "calls", j, "tool")
    return ("allowed_tools",) if getattr(decl, "allowed_tools", None) else ()


def project_payload(tool: ToolSpec, payload: dict) -> dict:
    """The lane payload as this tool's arguments: a closed object schema takes its declared
    top-level properties only; any other schema takes the whole payload."""
    schema = tool.input_schema
    if isinstance(schema, dict) and schema.get("type") == "object" and schema.get("additionalProperties") is False:
        declared = schema.get("properties") or {}
        return {k: v for k, v in payload.items() if k in declared}
    return dict(payload)


def admit_plan(
    path: str | os.PathLike,
    *,
    registry: str | None = None,
    app_root: str | None = None,
    max_concurrency: int | None = None,
    lanes: IO[bytes] | None = None,
    lanes_name: str = "-",
    default_timeout_s: float | None = None,
    spool: Any = None,
    stream: bool = False,
    depth: int = 0,
    max_depth: int | None = None,
    placement: str = "local",
    servers: Listing | None = None,
    context: dict | None = None,
) -> AdmittedPlan:
    """Load a plan and its registry and admit the whole plan; raises ``ConfigError`` listing
    every problem (plan and registry alike) when anything is wrong. ``depth`` is 0 for a top
    plan and grows for the child plans it runs (``max_depth`` is the top plan's cap);
    ``placement`` is where its calls will run (``local`` or ``ray``). ``servers`` is what the
    MCP discovery step found (``contract.mcp.discovered``); admission starts nothing,
    and raises ``ServersNeeded`` when the plan needs a server the listing lacks. A caller that
    brings no listing (a library caller, with no event loop of its own) has the discovery step
    run for it first, as ``discovered`` does."""
    if servers is None:
        from ..contract.mcp_discovery import discovered

        return discovered(lambda found: admit_plan(
            path, registry=registry, app_root=app_root, max_concurrency=max_concurrency, lanes=lanes,
            lanes_name=lanes_name, default_timeout_s=default_timeout_s, spool=spool, stream=stream, depth=depth,
            max_depth=max_depth, placement=placement, servers=found, context=context))
    decl, col = load_plan(path)
    if decl is None:
        raise ConfigError(col.problems)
    if context is not None:
        decl = decl.model_copy(update={"context": context})
    reg_path = registry_path_for(path, decl, registry)
    if reg_path is None:
        col.add("TL412", "the plan names no registry", (), "add 'registry: path/to/registry.yml' or pass --registry")
        raise ConfigError(col.problems)
    looked = look_at(reg_path)
    if looked.kind != "file":
        col.add("TL412", registry_missing(reg_path, looked), ("registry",), "fix the path (relative to the plan file) or pass --registry")
        raise ConfigError(col.problems)
    contract, reg_problems = load_registry(reg_path, default_timeout_s=default_timeout_s, app_root=app_root)
    if contract is None:
        raise ConfigError(col.problems + reg_problems)
    return admit_declaration(
        decl, col, contract, shown=display_path(path), registry_path=reg_path,
        warnings=[p for p in reg_problems if p.level == "warning"], max_concurrency=max_concurrency,
        lanes=lanes, lanes_name=lanes_name, spool=spool, stream=stream, plan_dir=FsPath(path).parent,
        depth=depth, max_depth=max_depth, placement=placement, servers=servers,
    )


def admit_declaration(
    decl: PlanDecl,
    col: Collector,
    contract: Contract,
    *,
    shown: str,
    registry_path: str,
    warnings: list[Problem],
    max_concurrency: int | None = None,
    lanes: IO[bytes] | None = None,
    lanes_name: str = "-",
    spool: Any = None,
    stream: bool = False,
    plan_dir: str | os.PathLike | None = None,
    depth: int = 0,
    max_depth: int | None = None,
    placement: str = "local",
    servers: Listing | None = None,
) -> AdmittedPlan:
    """Admit an already loaded plan declaration against a compiled contract; problems are
    placed through ``col`` (the plan file's, or the command line's for ``toolloop call``).
    ``servers``: what the MCP discovery step found (``ServersNeeded`` when the plan needs a
    server it lacks; nothing is listed here, whether given or not). The contract is not changed: the admitted plan holds a
    copy with its MCP tools filled in and its plan tools' effects set."""
    servers = {} if servers is None else servers
    sub = _subagent(decl, contract, col)
    contract, sub = _resolve_mcp_tools(contract, sub, col, servers)
    contract, sub, child_plans = _admit_child_plans(decl, contract, sub, col, lanes is not None, depth, max_depth,
                                                    servers)
    adm = _Admitter(contract, sub, col)
    routed = None
    if decl.mode == "sequential":
        admit_sequential(decl, adm, col)
    elif decl.mode == "parallel":
        admit_parallel(decl, adm, col, lanes, lanes_name, stream, spool)
    else:
        from .routed import admit_routed

        routed, other_files = admit_routed(decl, contract, sub, col, plan_dir, child=depth > 0)
        adm.extra.extend(other_files)
    adm.limits(("calls",) if decl.mode == "sequential" else ("lanes",) if decl.lanes is not None else ())
    _refuse_sandboxes(decl, sub, adm, col, placement, more_lanes=stream or decl.mode == "routed")
    mc = _concurrency(decl, max_concurrency, col)
    problems = col.problems + adm.extra
    if any(p.level == "error" for p in problems):
        raise ConfigError(problems)
    return AdmittedPlan(
        path=shown,
        decl=decl,
        contract=contract,
        subagent=sub,
        mode=decl.mode,
        lanes=adm.lanes,
        max_concurrency=mc or 1,
        plan_sha256=sha256_of(decl.model_dump(mode="json", exclude_unset=True)),
        registry_path=registry_path,
        warnings=warnings,
        spool=spool if spool is not None and spool.lanes else None,
        stream=_lane_stream(adm, lanes, lanes_name) if stream and lanes is not None else None,
        routed=routed,
        child_plans=child_plans,
    )


def _subagent(decl: PlanDecl, contract: Contract, col: Collector) -> SubagentSpec:
    """The plan's subagent (ConfigError with TL401 when the registry has none of that name)."""
    sub = contract.subagents.get(decl.subagent)
    if sub is None:
        near = did_you_mean(decl.subagent, contract.subagents)
        col.add("TL401", f"unknown subagent {quoted(decl.subagent)}", ("subagent",),
                f"did you mean {quoted(near)}?" if near else f"subagents: {listing(sorted(contract.subagents))}")
        raise ConfigError(col.problems)
    return sub


def _resolve_mcp_tools(contract: Contract, sub: SubagentSpec, col: Collector, servers: Listing
                       ) -> tuple[Contract, SubagentSpec]:
    """MCP tools: descriptions, schemas (and trusted annotations) from what their servers offer,
    which must still be the schemas toolloop.lock recorded."""
    if not any(t.kind == "mcp" for t in sub.tools.values()):
        return contract, sub  # nothing of MCP is loaded for a subagent without a server
    from ..contract.mcp import read_locked_hashes, resolve_server_tools

    filled, server_problems = resolve_server_tools(sub, servers, locked=read_locked_hashes(contract.file))
    if any(p.level == "error" for p in server_problems):
        raise ConfigError(col.problems + server_problems)
    col.problems.extend(server_problems)  # warnings (a server validate could not check)
    if filled is sub:
        return contract, sub
    return replace(contract, subagents={**contract.subagents, sub.id: filled}), filled


def _admit_child_plans(decl: PlanDecl, contract: Contract, sub: SubagentSpec, col: Collector, more_lanes: bool,
                       depth: int, max_depth: int | None, servers: Listing) -> tuple[Contract, SubagentSpec, dict]:
    """The child plans of the ``plan:`` tools the plan may call, admitted with it (``children.py``),
    and the contract with those tools' effects set."""
    if not any(t.kind == "plan" for t in sub.tools.values()):
        return contract, sub, {}
    from .children import admit_children

    usable = _usable_tools(decl, sub, more_lanes)
    contract, sub, child_plans, child_problems = admit_children(
        contract, sub, usable=usable, depth=depth, max_depth=max_depth if max_depth is not None else sub.max_depth,
        servers=servers)
    if child_problems:
        raise ConfigError(col.problems + child_problems)
    return contract, sub, child_plans


def admit_sequential(decl: PlanDecl, adm: _Admitter, col: Collector) -> None:
    """A sequential plan: its calls, one lane."""
    if decl.calls is None:
        col.add("TL202", "a sequential plan needs 'calls'", (), "add 'calls:' with a list of calls", at_key=True)
    keys: dict[str, int] = {}
    calls = []
    for i, c in enumerate(decl.calls or []):
        admitted = adm.call(0, None, i, c, ("calls", i), keys, None, False, col)
        adm.seq += 1
        if admitted is not None:
            calls.append(admitted)
    adm.lanes.append(AdmittedLane(0, None, None, calls))


def admit_parallel(decl: PlanDecl, adm: _Admitter, col: Collector, lanes: IO[bytes] | None, lanes_name: str,
                   stream: bool, spool: Any) -> None:
    """A parallel plan: its lanes, then those of ``--lanes`` (read now, or as the run goes
    under ``--stream``)."""
    for i, lane in enumerate(decl.lanes or []):
        adm.lane(lane, ("lanes", i), col)
    if lanes is not None and not stream:
        from .lanes import read_lanes

        read_lanes(lanes, lanes_name, adm, adm.extra, spool)
    elif decl.lanes is None and lanes is None:  # under --stream, lanes are read as the run goes
        col.add("TL202", "a parallel plan needs 'lanes' (or --lanes FILE)", (), "add 'lanes:'", at_key=True)


def _concurrency(decl: PlanDecl, given: int | None, col: Collector) -> int | None:
    """The plan's max_concurrency (``--max-concurrency`` first); TL409 when a parallel plan has
    none or one below 1."""
    mc = given if given is not None else decl.max_concurrency
    if decl.mode == "parallel":
        if mc is None:
            col.add("TL409", "max_concurrency is missing", (), "add 'max_concurrency: 4' or pass --max-concurrency 4", at_key=True)
        elif mc < 1:
            where = ("max_concurrency",) if given is None else ()
            col.add("TL409", f"max_concurrency must be at least 1, found {excerpt(mc)}", where, "use 1 or more")
    return mc


def _lane_stream(adm: _Admitter, lanes: IO[bytes], lanes_name: str) -> LaneStream:
    from .lanes import LaneStream  # built on _Admitter above; loaded only for a --lanes file

    return LaneStream(adm, lanes, lanes_name)


if TYPE_CHECKING:  # routed admission (and the router it checks against) loads only for routed plans
    from ..contract.mcp_discovery import Listing
    from .routed import RoutedSpec
