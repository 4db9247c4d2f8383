"""Loading, mechanical validation and compilation of a registry file: the file is read
(``document.py``), its broken parts left out (``salvage.py``), each tool compiled (``tools.py``)
and the subagents put together here."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from .._canonical import sha256_of
from .._paths import look_at
from .._text import listing, quoted
from .callables import resolve
from .compiled import Contract, SubagentSpec, ToolSpec
from .document import LoadedDoc, display_path, load_document
from .problems import Collector, Problem, did_you_mean, json_path, not_a
from .quick import REGISTRY, dumped, read
from .salvage import Partial, drop_consequences, salvage
from .source import LoadIssue
from .tools import compile_plan_tool, compile_tool

if TYPE_CHECKING:  # the models load only where a registry is not plainly well formed
    from .models import RegistryDecl, ToolDecl

# where the other modules have always found them
__all__ = ["LoadedDoc", "display_path", "load_document", "load_registry"]


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
    if not_a("registry", doc.data, col, REGISTRY.names,
             "name the App's registry: a YAML file with 'version: 1' and 'subagents:'"):
        return None, _sorted(col.problems)
    # a value refused while loading (a language tag, NaN) was replaced by null: leave its part out
    broken: list[tuple] = [i.path for i in doc.issues if i.code == "TL105"]
    decl: Any = None if broken else read(REGISTRY, doc.data)
    if decl is None:
        from pydantic import ValidationError

        from .models import RegistryDecl
        from .validation import report_model_errors

        try:
            decl = RegistryDecl.model_validate(doc.data)
        except ValidationError as exc:
            broken += report_model_errors(exc, RegistryDecl, col, data=doc.data)
            decl = None
            drop_consequences(col, [json_path(i.path) for i in doc.issues if i.code == "TL105"])
    partial = Partial()
    if broken:
        decl = salvage(doc.data, broken, partial)
    if decl is None:
        return None, _sorted(col.problems)
    contract = _compile(decl, FsPath(path), col, default_timeout_s, app_root, partial, keep_partial)
    problems = _sorted(col.problems)
    if col.has_errors and not keep_partial:
        return None, problems
    return contract, problems


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
    partial: Partial | None = None,
    keep_partial: bool = False,
) -> Contract | None:
    partial = partial or Partial()
    root = _root_for(decl, path, col, app_root_override)
    evidence = None
    if decl.evidence is not None and root is not None:
        r = resolve(decl.evidence, root)
        if r.fn is None:
            col.add("TL360", f"evidence hook: {r.message}", ("evidence",), r.hint)
        evidence = r.fn
    missing: dict[str, list] = {}  # third-party module not installed -> the tools that need it
    subagents = {sid: _compile_subagent(sid, sdecl, path, col, default_timeout_s, root, partial, missing)
                 for sid, sdecl in decl.subagents.items()}
    _report_missing(missing, col)
    if (col.has_errors and not keep_partial) or root is None:
        return None
    return Contract(
        file=str(path),
        app_root=root,
        subagents=subagents,
        contract_sha256=sha256_of(dumped(decl)),
        evidence=evidence,
        decl=decl,
    )


def _compile_subagent(sid: str, sdecl: Any, path: FsPath, col: Collector, default_timeout_s: float | None,
                      root: str | None, partial: Partial, missing: dict[str, list]) -> SubagentSpec:
    """One subagent's tools compiled, and the tool names its allowlist and dispatches give checked."""
    rd = sdecl.runner_defaults
    check_timeout = sid not in partial.unknown_defaults
    tools: dict[str, ToolSpec] = {}
    names: set[str] = set()
    for tid, tdecl in sdecl.tools.items():
        if tdecl.plan is not None and tdecl.callable is None and tdecl.mcp is None:
            spec = compile_plan_tool(sid, tid, tdecl, path, rd.tool_timeout_s, default_timeout_s, col)
        else:
            spec = compile_tool(sid, tid, tdecl, rd.tool_timeout_s, default_timeout_s, root, col, check_timeout,
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
    return SubagentSpec(sid, tools, allowed, rd.max_calls, rd.tool_timeout_s,
                        rd.max_depth if rd.max_depth is not None else 2)


def _report_missing(missing: dict[str, list], col: Collector) -> None:
    """TL306 once per third-party module that is not installed, naming the tools that need it."""
    for module, needed_by in missing.items():
        _tid, where, first = needed_by[0]
        tools = [f"'{tid}'" for tid, _w, _r in needed_by]
        shown = ", ".join(tools[:3]) + (f" and {len(tools) - 3} more" if len(tools) > 3 else "")
        col.add("TL306", f"{first.message} (needed by {'tool' if len(tools) == 1 else 'tools'} {shown})", where,
                first.hint)


def _mcp_tools(tid: str, tdecl: ToolDecl, spec: ToolSpec | None) -> dict[str, ToolSpec | None]:
    """The tools a declaration gives: itself, or for an MCP server whose ``allow`` lists several
    names, one tool ``<id>.<name>`` each."""
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


