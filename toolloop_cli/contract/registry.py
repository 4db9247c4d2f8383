"""Loading, mechanical validation and compilation of a registry file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path as FsPath
from typing import Any, Callable

from pydantic import ValidationError

from .._canonical import sha256_of
from .._paths import look_at
from .._text import clip, excerpt, listing, quoted
from . import schemas
from .approval import compile_approval
from .callables import detect_runtime, is_async, resolve
from .compiled import NO_RETRY, Contract, RetryPolicy, SubagentSpec, ToolSpec, timeout_of
from .envelope import compile_envelope
from .models import RegistryDecl, ToolDecl
from .problems import Collector, Problem, did_you_mean, json_path, not_a
from .sandbox import compile_sandbox
from .source import LoadIssue, SourceMap, YamlRejected, load_yaml
from .validation import report_model_errors


def display_path(path: str | os.PathLike) -> str:
    """The path as a user should see it: relative to the current folder when below it."""
    p = FsPath(path)
    try:
        return str(p.resolve().relative_to(FsPath.cwd().resolve()))
    except (ValueError, OSError):  # not below the current folder, or not a name the system takes
        return str(p)


@dataclass
class LoadedDoc:
    data: Any
    smap: SourceMap
    collector: Collector
    issues: list[LoadIssue] = field(default_factory=list)


def load_document(path: str | os.PathLike, recode: Callable[[LoadIssue], LoadIssue] | None = None) -> LoadedDoc:
    """Read and parse a YAML file; load failures become findings (TL101, TL102, TL104...).

    ``recode`` may turn a generic load issue into a more specific one (a duplicate tool id
    rather than a duplicate key) before it becomes a finding.
    """
    shown = display_path(path)
    smap = SourceMap(shown)
    col = Collector(smap)
    try:
        text = FsPath(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        col.add("TL101", f"file not found: {excerpt(str(path))}", hint="check the path")
        return LoadedDoc(None, smap, col)
    except IsADirectoryError:
        col.add("TL101", f"cannot read {excerpt(str(path))}: it is a folder", hint="name a YAML file")
        return LoadedDoc(None, smap, col)
    except UnicodeDecodeError as exc:
        col.add("TL101", f"cannot read {excerpt(str(path))}: not UTF-8 text (byte {exc.start})", hint="save the file as UTF-8")
        return LoadedDoc(None, smap, col)
    except OSError as exc:
        col.add("TL101", f"cannot read {excerpt(str(path))}: {exc.strerror or clip(str(exc))}", hint="check the file exists and is readable")
        return LoadedDoc(None, smap, col)
    except ValueError:  # a NUL byte in the name
        col.add("TL101", f"cannot read {excerpt(str(path))}: not a file name", hint="check the path")
        return LoadedDoc(None, smap, col)
    try:
        data, smap, issues = load_yaml(text, shown)
    except YamlRejected as rej:
        i = rej.issue
        col.problems.append(Problem(i.code, i.message, shown, i.line, i.col, json_path(i.path), i.hint))
        return LoadedDoc(None, smap, col)
    if recode is not None:
        issues = [recode(i) for i in issues]
    col = Collector(smap)
    for i in issues:
        col.problems.append(Problem(i.code, i.message, shown, i.line, i.col, json_path(i.path), i.hint))
    if not isinstance(data, dict):
        # text is not quoted: a file given by mistake may be anything (a .env file, a password list)
        found = ("a list" if isinstance(data, list) else f"text ({len(data)} characters)" if isinstance(data, str)
                 else f"the single value {quoted(data)}")
        col.add("TL106", f"the document must be a mapping at the top level, found {found}",
                hint="start with 'version: 1'")
        return LoadedDoc(None, smap, col, issues)
    return LoadedDoc(data, smap, col, issues)


def _tool_id_issue(issue: LoadIssue) -> LoadIssue:
    """A duplicate key that is a tool id is a duplicate tool (TL301)."""
    p = issue.path
    if issue.code == "TL103" and len(p) == 4 and p[0] == "subagents" and p[2] == "tools":
        first = issue.message.rsplit("line ", 1)[-1].rstrip(")")
        return LoadIssue(
            "TL301",
            f"duplicate tool id {quoted(p[3])} in subagent {quoted(p[1])} (first defined at line {first})",
            issue.line,
            issue.col,
            p,
            "rename one of the two tools, or remove one",
        )
    return issue


def _sorted(problems: list[Problem]) -> list[Problem]:
    return sorted(problems, key=lambda p: p.sort_key)


def load_registry(
    path: str | os.PathLike,
    *,
    default_timeout_s: float | None = None,
    app_root: str | None = None,
    keep_partial: bool = False,
) -> tuple[Contract | None, list[Problem]]:
    """Load, validate and compile a registry.

    Returns the compiled ``Contract`` (None when any error was found) and every finding,
    warnings included, sorted by place. Parts of the file that fail their declaration (an
    unknown key, a wrong type) are left out and the rest is still checked, so one run reports
    the mistakes of the whole file. With ``keep_partial`` a registry with errors still gives
    the contract of what compiled (its broken tools left out), for ``validate`` to check plans
    against as far as it can; nothing runs on such a contract.
    """
    doc = load_document(path, recode=_tool_id_issue)
    col = doc.collector
    if doc.data is None:
        return None, _sorted(col.problems)
    if "subagents" not in doc.data and "mode" in doc.data and "subagent" in doc.data:
        col.add("TL106", "this file is a plan, not a registry", (),
                "pass the registry first: toolloop validate REGISTRY PLAN")
        return None, _sorted(col.problems)
    if not_a("registry", doc.data, col, RegistryDecl.model_fields,
             "name the App's registry: a YAML file with 'version: 1' and 'subagents:'"):
        return None, _sorted(col.problems)
    # a value refused while loading (a language tag, NaN) was replaced by null: leave its part out
    broken: list[tuple] = [i.path for i in doc.issues if i.code == "TL105"]
    try:
        decl: RegistryDecl | None = RegistryDecl.model_validate(doc.data)
    except ValidationError as exc:
        broken += report_model_errors(exc, RegistryDecl, col, data=doc.data)
        decl = None
        _drop_consequences(col, [json_path(i.path) for i in doc.issues if i.code == "TL105"])
    partial = _Partial()
    if broken:
        decl = _salvage(doc.data, broken, partial)
    if decl is None:
        return None, _sorted(col.problems)
    contract = _compile(decl, FsPath(path), col, default_timeout_s, app_root, partial, keep_partial)
    problems = _sorted(col.problems)
    if col.has_errors and not keep_partial:
        return None, problems
    return contract, problems


@dataclass
class _Partial:
    """What was left out of a registry with broken parts, so that checks of the rest do not
    report consequences of the same mistake twice."""

    left_out_tools: dict[str, set[str]] = field(default_factory=dict)
    unknown_defaults: set[str] = field(default_factory=set)
    skip_evidence: bool = False
    misspelled: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (subagent, tool) -> fields


def _drop_consequences(col: Collector, refused: list[str]) -> None:
    """A value refused while loading is null in the data: structure findings at or below it
    only repeat the same mistake."""
    def below(path: str) -> bool:
        return any(path == r or path.startswith((r + ".", r + "[")) for r in refused)

    col.problems[:] = [p for p in col.problems if not (p.code.startswith("TL2") and below(p.path))]


def _salvage(data: dict, broken: list[tuple], partial: _Partial) -> RegistryDecl | None:
    """The declaration without the broken tools, runner_defaults and unknown keys, or None
    when what is broken is needed to check anything else (subagents, app_root)."""
    top = dict(data)
    subs = dict(top["subagents"]) if isinstance(top.get("subagents"), dict) else None
    if subs is not None:
        top["subagents"] = subs
        for sid, sub in subs.items():
            if isinstance(sub, dict):
                subs[sid] = dict(sub)
                if isinstance(sub.get("tools"), dict):
                    subs[sid]["tools"] = dict(sub["tools"])
    for loc in broken:
        if not loc:
            return None
        head = loc[0]
        if head == "version":
            top["version"] = 1
            continue
        if head in ("app_root",) or (head == "subagents" and (len(loc) == 1 or subs is None)):
            return None
        if head != "subagents":
            top.pop(head, None)
            partial.skip_evidence = partial.skip_evidence or head == "evidence"
            continue
        sid = loc[1]
        sub = subs.get(sid)
        if not isinstance(sub, dict) or len(loc) == 2:
            subs.pop(sid, None)
            continue
        key = loc[2]
        if key == "tools":
            if len(loc) == 3 or not isinstance(sub.get("tools"), dict):
                subs.pop(sid, None)
                continue
            tid = loc[3]
            tool = sub["tools"].get(tid)
            if (len(loc) == 5 and isinstance(tool, dict) and loc[4] not in ToolDecl.model_fields
                    and str(tid) not in partial.left_out_tools.get(str(sid), set())):
                # an unknown key alone: check the rest of the tool without it (a misspelled
                # required key is then not reported missing as well)
                sub["tools"][tid] = {k: v for k, v in tool.items() if k != loc[4]}
                near = did_you_mean(str(loc[4]), ToolDecl.model_fields)
                if near is not None:
                    partial.misspelled.setdefault((str(sid), str(tid)), set()).add(near)
                continue
            sub["tools"].pop(tid, None)
            partial.left_out_tools.setdefault(str(sid), set()).add(str(tid))
        elif key == "runner_defaults":
            sub.pop("runner_defaults", None)
            partial.unknown_defaults.add(str(sid))
        else:
            sub.pop(key, None)
    try:
        return RegistryDecl.model_validate(top)
    except ValidationError:
        return None


def _root_for(decl: RegistryDecl, path: FsPath, col: Collector, override: str | None) -> str | None:
    """The folder put first on sys.path, or None (with a finding) when it is not a folder."""
    base = path.resolve().parent
    root = FsPath(override) if override is not None else base / decl.app_root if decl.app_root is not None else base
    looked = look_at(root)
    if looked.kind != "folder":
        given = "--app-root" if override is not None else "app_root"
        shown = override if override is not None else decl.app_root or str(base)
        why = f": {looked.why}" if looked.kind == "bad" else ""
        col.add("TL312", f"{given} {quoted(shown)} is not a folder, so no callable can be resolved{why}", ("app_root",),
                "point app_root (relative to the registry file) at the folder holding the App package")
        return None
    return str(root.resolve())


def _compile(
    decl: RegistryDecl,
    path: FsPath,
    col: Collector,
    default_timeout_s: float | None,
    app_root_override: str | None,
    partial: _Partial | None = None,
    keep_partial: bool = False,
) -> Contract | None:
    partial = partial or _Partial()
    root = _root_for(decl, path, col, app_root_override)
    evidence = None
    if decl.evidence is not None and root is not None:
        r = resolve(decl.evidence, root)
        if r.fn is None:
            col.add("TL360", f"evidence hook: {r.message}", ("evidence",), r.hint)
        evidence = r.fn
    subagents: dict[str, SubagentSpec] = {}
    missing: dict[str, list] = {}  # third-party module not installed -> the tools that need it
    for sid, sdecl in decl.subagents.items():
        rd = sdecl.runner_defaults
        check_timeout = sid not in partial.unknown_defaults
        tools: dict[str, ToolSpec] = {}
        names: set[str] = set()
        for tid, tdecl in sdecl.tools.items():
            if tdecl.plan is not None and tdecl.callable is None and tdecl.mcp is None:
                spec = _compile_plan_tool(sid, tid, tdecl, path, rd.tool_timeout_s, default_timeout_s, col)
            else:
                spec = _compile_tool(sid, tid, tdecl, rd.tool_timeout_s, default_timeout_s, root, col, check_timeout,
                                     misspelled=partial.misspelled.get((sid, tid), set()), missing=missing)
            expanded = _mcp_tools(tid, tdecl, spec)
            names |= set(expanded) if expanded else {tid}
            tools.update({k: v for k, v in expanded.items() if v is not None})
        known = names | partial.left_out_tools.get(sid, set())
        for i, name in enumerate(rd.allowed_tools or []):
            if name not in known:
                _unknown_tool(col, "TL302", f"allowed_tools names {quoted(name)}, which is not a tool of subagent {quoted(sid)}",
                              name, known, ("subagents", sid, "runner_defaults", "allowed_tools", i))
        for tid, tdecl in sdecl.tools.items():
            for i, name in enumerate(tdecl.dispatch):
                if name not in known:
                    _unknown_tool(col, "TL303", f"tool {quoted(tid)} dispatches to {quoted(name)}, which is not a tool of subagent {quoted(sid)}",
                                  name, known, ("subagents", sid, "tools", tid, "dispatch", i))
        allowed = tuple(rd.allowed_tools) if rd.allowed_tools is not None else tuple(sorted(names))
        subagents[sid] = SubagentSpec(sid, tools, allowed, rd.max_calls, rd.tool_timeout_s,
                                      rd.max_depth if rd.max_depth is not None else 2)
    for module, needed_by in missing.items():
        _tid, where, first = needed_by[0]
        tools = [f"'{tid}'" for tid, _w, _r in needed_by]
        shown = ", ".join(tools[:3]) + (f" and {len(tools) - 3} more" if len(tools) > 3 else "")
        col.add("TL306", f"{first.message} (needed by {'tool' if len(tools) == 1 else 'tools'} {shown})", where,
                first.hint)
    if (col.has_errors and not keep_partial) or root is None:
        return None
    return Contract(
        file=str(path),
        app_root=root,
        subagents=subagents,
        contract_sha256=sha256_of(decl.model_dump(mode="json", exclude_unset=True)),
        evidence=evidence,
        decl=decl,
    )


def _mcp_tools(tid: str, tdecl: ToolDecl, spec: ToolSpec | None) -> dict[str, ToolSpec | None]:
    """The tools a declaration gives: itself, or for an MCP server whose ``allow`` lists several
    names, one tool ``<id>.<name>`` each (SPEC 5.8)."""
    if tdecl.mcp is None or tdecl.callable is not None:
        return {tid: spec}
    allow = tdecl.mcp.allow
    if len(allow) == 1:
        return {tid: None if spec is None else replace(spec, ref=allow[0])}
    return {f"{tid}.{name}": None if spec is None else replace(spec, id=f"{tid}.{name}", ref=name) for name in allow}


def _unknown_tool(col: Collector, code: str, message: str, name: str, names: set[str], where: tuple) -> None:
    near = did_you_mean(name, names)
    col.add(code, message, where,
            f"did you mean {quoted(near)}?" if near else f"registered tools: {listing(sorted(names)) or 'none'}")


def _compile_tool(
    sid: str,
    tid: str,
    t: ToolDecl,
    subagent_timeout: float | None,
    default_timeout_s: float | None,
    root: str | None,
    col: Collector,
    check_timeout: bool = True,
    misspelled: set[str] | frozenset[str] = frozenset(),
    missing: dict[str, list] | None = None,
) -> ToolSpec | None:
    """One tool declaration checked and compiled; every problem goes to ``col`` (None if any is an error)."""
    at = ("subagents", sid, "tools", tid)
    errors_before = sum(p.level == "error" for p in col.problems)
    _check_kind(tid, t, at, col)
    effect, idempotent, annotated = t.effect, t.idempotent, frozenset[str]()
    if t.mcp is not None:
        effect, idempotent, annotated = _mcp_effect(tid, t, at, col)
    fn, failed = _resolve_callable(tid, t, at, root, col, misspelled, missing)
    if check_timeout and t.timeout_s is None and subagent_timeout is None and default_timeout_s is None:
        col.add("TL310", f"tool {quoted(tid)} has no timeout", at,
                "set timeout_s on the tool or runner_defaults.tool_timeout_s", at_key=True)
    asynchronous, runtime = _runtime_of(t, fn, at, col)
    sandbox = compile_sandbox(tid, t, at, root, col, "callable" if t.mcp is None else "mcp", asynchronous)
    validators = _compile_schemas(t, at, col)
    envelope = None
    if t.control_envelope is not None:
        envelope, eprobs = compile_envelope(t.control_envelope, t.output_schema)
        for sub, message in eprobs:
            col.add("TL330", message, at + ("control_envelope",) + sub,
                    "fix the envelope mapping (see the control envelope section of docs/calls.md)")
    redact = _check_redaction(t, at, col)
    writes_once = _check_retry(tid, t, at, col)
    if t.mcp is not None and not annotated:  # an MCP tool of unknown effect is a write (TL316)
        writes_once = effect in ("write", "destructive") and not idempotent
    gate = _compile_gate(tid, t, at, col)
    if failed or sum(p.level == "error" for p in col.problems) > errors_before:
        return None
    timeout = _timeout_of(t, subagent_timeout, default_timeout_s)
    return ToolSpec(
        subagent=sid,
        id=tid,
        kind="callable" if t.callable is not None else "mcp",
        ref=t.callable or "",
        fn=fn,
        is_async=asynchronous,
        description=t.description or "",
        input_schema=t.input_schema if t.input_schema is not None else {},
        output_schema=t.output_schema if t.output_schema is not None else {},
        input_validator=validators.get("input_schema"),
        output_validator=validators.get("output_schema"),
        cacheable=t.cacheable,
        timeout_s=timeout,
        retry=_retry_policy(t, writes_once),
        isolation=t.isolation,
        **_limits(t),
        effect=effect,
        idempotent=idempotent,
        redact=tuple(redact),
        approval=gate,
        approval_text=_approval_text(t),
        dispatch=tuple(t.dispatch),
        envelope=envelope,
        contract_sha256=sha256_of(t.model_dump(mode="json", exclude_unset=True)),
        mcp=t.mcp,
        runtime=runtime,
        from_server=_from_server(t) | annotated,
        source=(col.smap.file, *col.smap.position(at, at_key=True)),
        sandbox=sandbox,
    )


def _timeout_of(t: ToolDecl, subagent_timeout: float | None, default_timeout_s: float | None) -> float | None:
    return timeout_of(t.timeout_s, subagent_timeout, default_timeout_s)


def _retry_policy(t: ToolDecl, writes_once: bool) -> RetryPolicy:
    if t.retry is None:
        return NO_RETRY
    # by default a write that is not idempotent is retried after errors only (TL352)
    on = frozenset(t.retry.on) - ({"timeout"} if writes_once else set())
    return RetryPolicy(t.retry.max_attempts, t.retry.backoff_s, t.retry.max_backoff_s, on)


def _limits(t: ToolDecl) -> dict:
    c = t.concurrency
    return {"max_in_flight": c.max_in_flight if c else None, "per_second": c.per_second if c else None,
            "max_calls": t.max_calls}


def _approval_text(t: ToolDecl) -> str | None:
    if t.approval is None:
        return None
    return "required" if t.approval == "required" else t.approval.when


def _from_server(t: ToolDecl) -> frozenset[str]:
    """MCP tools: which of description and schemas come from the server's tools/list."""
    if t.mcp is None:
        return frozenset()
    return frozenset(name for name, value in (("description", t.description), ("input", t.input_schema),
                                              ("output", t.output_schema)) if value is None)


def _compile_plan_tool(sid: str, tid: str, t: ToolDecl, registry_path: FsPath, subagent_timeout: float | None,
                       default_timeout_s: float | None, col: Collector) -> ToolSpec | None:
    """A tool ``plan: FILE``: a routed plan run as a child run. Its input schema is the child plan's
    ``inputs`` (default: an object), its output schema the child's ``final_schema``; the child plan
    itself is admitted with the plan that calls it, which also sets the tool's effect (the
    strongest among the child's tools) unless the registry declares one."""
    at = ("subagents", sid, "tools", tid)
    looked = look_at(registry_path.parent / t.plan)  # type: ignore[operator]
    if looked.kind == "bad":
        col.add("TL315", f"plan tool {quoted(tid)}: {quoted(str(t.plan))} is not a readable plan file: {looked.why}",
                at + ("plan",), "fix the path (relative to the registry file) to a routed plan")
        return None
    child = (registry_path.parent / t.plan).resolve()  # type: ignore[operator]
    doc = load_document(child) if looked.kind == "file" else None
    data = doc.data if doc is not None and isinstance(doc.data, dict) else None
    if data is None:
        col.add("TL315", f"plan tool {quoted(tid)}: {quoted(str(t.plan))} is not a readable plan file", at + ("plan",),
                "fix the path (relative to the registry file) to a routed plan")
        return None
    inputs = data.get("inputs") if data.get("inputs") is not None else {"type": "object"}
    final = data.get("final_schema") if data.get("final_schema") is not None else {}
    # writeOnly properties of the child's schemas are redacted like `redact` pointers, as for
    # every other tool (the child's context is journaled redacted too)
    redact = list(t.redact)
    for schema in (inputs, final):
        try:
            redact.extend(p for p in schemas.write_only_pointers(schema) if p not in redact)
        except Exception:  # noqa: BLE001 - a malformed schema: the child plan's own admission reports it
            pass
    validators = {}
    for key, schema in (("input", inputs), ("output", final)):
        try:
            validators[key] = schemas.compile_validator(schema, mask=bool(redact))
        except Exception:  # noqa: BLE001 - the child plan's own admission reports its schema
            validators[key] = None
    errors_before = sum(p.level == "error" for p in col.problems)
    gate = _compile_gate(tid, t, at, col)
    compile_sandbox(tid, t, at, None, col, "plan", False)
    if sum(p.level == "error" for p in col.problems) > errors_before:
        return None
    timeout = _timeout_of(t, subagent_timeout, default_timeout_s)
    goal = data.get("goal")
    return ToolSpec(
        subagent=sid, id=tid, kind="plan", ref=str(child), fn=None, is_async=False,
        description=t.description or (goal if isinstance(goal, str) else ""),
        input_schema=inputs, output_schema=final, input_validator=validators["input"],
        output_validator=validators["output"], cacheable=t.cacheable, timeout_s=timeout,
        retry=_retry_policy(t, False), isolation="thread", **_limits(t),
        # "" until admission reads the child plan, unless the registry says
        effect=t.effect if "effect" in t.model_fields_set else "", idempotent=t.idempotent,
        redact=tuple(redact), approval=gate, approval_text=_approval_text(t), dispatch=(), envelope=None,
        contract_sha256=sha256_of([t.model_dump(mode="json", exclude_unset=True), sha256_of(data)]),
        source=(col.smap.file, *col.smap.position(at, at_key=True)),
    )




def _check_kind(tid: str, t: ToolDecl, at: tuple, col: Collector) -> None:
    kinds = [k for k in ("callable", "mcp", "plan") if getattr(t, k) is not None]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "none of them"
        col.add("TL309", f"tool {quoted(tid)} needs exactly one of 'callable', 'mcp' or 'plan', found {found}", at,
                "keep one of them" if kinds else "add 'callable: package.module:function'", at_key=True)
    if t.mcp is not None:
        from .mcp import client_missing

        why = client_missing()
        if why is not None:
            col.add("TL313", f"tool '{tid}' comes from an MCP server, and the MCP client cannot be imported ({why})",
                    at + ("mcp",), "pip install 'toolloop-cli[mcp]'", at_key=True)


def _resolve_callable(tid: str, t: ToolDecl, at: tuple, root: str | None, col: Collector,
                      misspelled: set[str] | frozenset[str], missing: dict[str, list] | None) -> tuple[Any, bool]:
    """The callable (or None) and whether it failed in a way reported later, once for all tools
    (a missing third-party module)."""
    if t.callable is None:
        return None, False
    for key in ("description", "input_schema", "output_schema"):
        if getattr(t, key) is None and key not in misspelled:
            col.add("TL202", f"required key {quoted(key)} is missing for callable tool {quoted(tid)}", at,
                    f"add '{key}:' ({'{}'} means open)" if key != "description" else "add 'description:'", at_key=True)
    if root is None:
        return None, False
    r = resolve(t.callable, root)
    if r.fn is None and r.missing is not None and missing is not None:
        missing.setdefault(r.missing, []).append((tid, at + ("callable",), r))  # one finding, in _compile
        return None, True
    if r.fn is None:
        col.add(r.code or "TL306", r.message, at + ("callable",), r.hint)
    return r.fn, False


def _runtime_of(t: ToolDecl, fn: Any, at: tuple, col: Collector) -> tuple[bool, str]:
    """Whether the callable is async, and the event loop it needs (contract/callables.py)."""
    asynchronous = fn is not None and is_async(fn)
    runtime = "trio"
    if asynchronous:
        runtime, suspects = detect_runtime(fn)
        if suspects:
            names = ", ".join(f"'{s}'" for s in suspects)
            col.add("TL314", f"async callable '{t.callable}' will run on trio, but it calls {names}, which"
                    f" {'is' if len(suspects) == 1 else 'are'} built on asyncio", at + ("callable",),
                    "decorate it with toolloop_cli.asyncio_tool to run it on asyncio (or set"
                    " fn.__toolloop_runtime__ = 'trio' if it does run on trio)", level="warning")
    if t.isolation == "process" and asynchronous:
        col.add("TL311", f"isolation: process applies to sync callables only, and {quoted(t.callable)} is async",
                at + ("isolation",), "remove 'isolation' or make the callable sync")
    return asynchronous, runtime


def _compile_schemas(t: ToolDecl, at: tuple, col: Collector) -> dict[str, Any]:
    """The input and output schemas meta-validated and compiled (None where absent or wrong)."""
    validators: dict[str, Any] = {}
    for key in ("input_schema", "output_schema"):
        schema = getattr(t, key)
        validators[key] = None
        if schema is None:
            continue
        ok = True
        for spath, message, hint in schemas.meta_errors(schema):
            col.add("TL320", f"{key} is not a valid JSON Schema: {message}", at + (key,) + spath,
                    hint or "see https://json-schema.org/draft/2020-12 for the keyword's form")
            ok = False
        for spath, code, message in schemas.check_refs(schema):
            col.add(code, message, at + (key,) + spath, "use a local reference such as '#/$defs/name'")
            ok = False
        if not ok:
            continue
        try:
            validators[key] = schemas.compile_validator(schema, mask=bool(t.redact) or _has_write_only(schema))
        except Exception as exc:  # noqa: BLE001 - the validator library's own errors
            col.add("TL320", f"{key} does not compile: {clip((str(exc).splitlines() or [type(exc).__name__])[0])}",
                    at + (key,), "fix the keyword the message names")
    return validators


def _check_redaction(t: ToolDecl, at: tuple, col: Collector) -> list[str]:
    """The tool's redaction pointers (``redact`` and ``writeOnly`` properties), checked."""
    redact = list(t.redact)
    write_only = [p for key in ("input_schema", "output_schema") for p in schemas.write_only_pointers(getattr(t, key))]
    for i, ptr in enumerate(t.redact):
        if not schemas.is_json_pointer(ptr):
            fix = f"write {quoted('/' + ptr)}" if not ptr.startswith("/") else "escape '~' as '~0' and '/' inside a key as '~1'"
            col.add("TL340", f"redact entry {quoted(ptr)} is not a JSON Pointer", at + ("redact", i), fix)
            continue
        if not (schemas.pointer_can_match(t.input_schema, ptr) or schemas.pointer_can_match(t.output_schema, ptr)):
            col.add("TL341", f"redact pointer {quoted(ptr)} can never match the input or output schema", at + ("redact", i),
                    "fix the pointer (e.g. to a declared property) or remove it", level="warning")
    covering = list(t.redact) + write_only
    for key in ("input_schema", "output_schema"):
        schema = getattr(t, key)
        for name, ptr, _sub, spath in schemas.iter_properties_at(schema):
            if schemas.looks_secret(name) and not any(schemas.pointer_covers(c, ptr) for c in covering):
                col.add("TL342", f"property {quoted(name)} of {key} looks like a secret but is not redacted",
                        at + (key,) + spath, f"add {quoted(ptr)} to redact, or mark it writeOnly: true",
                        level="warning", at_key=True)
        redact.extend(p for p in schemas.write_only_pointers(schema) if p not in redact)
    return redact


def _check_retry(tid: str, t: ToolDecl, at: tuple, col: Collector) -> bool:
    """Retry policy findings; returns whether the tool is an at-most-once write."""
    if t.retry is not None and t.retry.max_backoff_s is not None and t.retry.max_backoff_s < t.retry.backoff_s:
        col.add("TL351", f"retry.max_backoff_s ({t.retry.max_backoff_s}) is below retry.backoff_s ({t.retry.backoff_s})",
                at + ("retry", "max_backoff_s"), "raise max_backoff_s or lower backoff_s")
    if t.retry is not None and t.retry.max_attempts > 1 and not t.retry.on:
        col.add("TL351", f"retry.max_attempts is {t.retry.max_attempts} but retry.on is empty, so nothing is ever retried",
                at + ("retry", "on"), "list what to retry, e.g. on: [timeout, error], or set max_attempts: 1")
    writes_once = t.effect in ("write", "destructive") and not t.idempotent
    if writes_once and t.retry is not None and "on" in t.retry.model_fields_set and "timeout" in t.retry.on:
        col.add("TL352", f"tool {quoted(tid)} has effect: {t.effect} and is not idempotent, so it is never retried "
                "after a timeout (its first attempt may still be running, or may already have written)",
                at + ("retry", "on", t.retry.on.index("timeout")),
                "remove timeout from retry.on, or set idempotent: true if running it twice is safe")
    return writes_once


def _compile_gate(tid: str, t: ToolDecl, at: tuple, col: Collector) -> Any:
    """The approval gate (or None), and the warning for a write nobody is asked about."""
    gate = None
    if t.approval == "required":
        from .approval import RequiredGate

        gate = RequiredGate()
    elif t.approval is not None:
        gate, err = compile_approval(t.approval.when)
        if err:
            col.add("TL350", err, at + ("approval", "when"), "write a CEL expression over 'args', e.g. args.amount > 200")
    if t.effect in ("write", "destructive") and t.approval is None and t.mcp is None:
        col.add("TL353", f"tool {quoted(tid)} has effect: {t.effect} and no approval gate: a model or a plan can"
                " run it with no person asked", at + ("effect",) if "effect" in t.model_fields_set else at,
                "add approval: {when: ...} or approval: required, or accept it with # toolloop: ignore[TL353]",
                level="warning", at_key=True)
    return gate


def _mcp_effect(tid: str, t: ToolDecl, at: tuple, col: Collector) -> tuple[str, bool, frozenset[str]]:
    """An MCP tool's server declaration checked (TL317), and its effect: the registry's; else,
    from a trusted server, its annotations (filled in at admission, ``contract/mcp.py``); else
    ``write`` (at most once) with a warning (TL316). Returns (effect, idempotent, what the
    server's annotations decide)."""
    m = t.mcp
    assert m is not None
    from .mcp import check_declaration

    check_declaration(tid, m, at + ("mcp",), col)
    given = t.model_fields_set
    if "effect" in given:
        return t.effect, t.idempotent, frozenset()
    if m.trusted:
        return "write", t.idempotent, frozenset({"effect"} | ({"idempotent"} if "idempotent" not in given else set()))
    col.add("TL316", f"the effect of MCP tool {quoted(tid)} is unknown (its server is not trusted), so it is treated as"
                     " 'write': run at most once, never retried after a timeout", at, "set effect: read, write or"
            " destructive on the tool, or trusted: true on its mcp block to take the server's annotations",
            level="warning", at_key=True)
    return "write", t.idempotent, frozenset()


def _has_write_only(schema: Any) -> bool:
    return bool(schemas.write_only_pointers(schema))
