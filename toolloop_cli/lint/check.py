"""Checking registries and plans as ``run`` will: each plan against the registry it names (or
``--registry``), loaded with the same flags (``--timeout``, ``--app-root``) and admitted with the
same admission (``--max-concurrency``), so a plan that passes is never rejected by ``run`` on the
same files. Each registry is checked once, however many plans name it.

A plan is checked as far as it can be: one whose own declaration is broken still has its
``registry:`` checked, and one whose registry has errors is admitted against what of the
registry compiled (findings about the broken tools left out, as they only repeat the
registry's). The report says which plans could not be checked fully, and why."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._text import listing, quoted
from ..contract.problems import Problem
from .discover import Target


@dataclass(frozen=True)
class Flags:
    """The ``run`` flags a plan will be run with."""

    registry: str | None = None
    app_root: str | None = None
    timeout: float | None = None
    max_concurrency: int | None = None
    locked: bool = False


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    registries: int = 0
    plans: int = 0
    suites: int = 0
    #: (plan as shown, why it could not be checked fully)
    partly: list[tuple[str, str]] = field(default_factory=list)
    #: (registry as shown, its MCP tools that were not checked against their servers)
    mcp_unchecked: list[tuple[str, list[str]]] = field(default_factory=list)


@dataclass
class _Registry:
    contract: Any  # None when the registry has errors
    partial: Any  # what compiled of it (None when nothing could be)
    broken: set[str]  # tool ids declared in the file that did not compile, per "subagent/tool"
    shown: str
    mcp_checked: set[str] = field(default_factory=set)  # subagents whose MCP servers were reached


class Checker:
    def __init__(self, flags: Flags):
        self.flags = flags
        self.report = Report()
        self._registries: dict[str, Any] = {}  # resolved path -> compiled contract (None when rejected)
        self._servers: dict[tuple, Any] = {}  # what the MCP servers listed so far offer (contract.mcp.Listing)
        self._seen: set[Problem] = set()

    def _add(self, problems: list[Problem]) -> None:
        for p in problems:
            if p not in self._seen:
                self._seen.add(p)
                self.report.problems.append(p)

    def registry(self, path: str | os.PathLike) -> Any:
        """The compiled contract of a registry (None when it has errors); its findings are
        reported the first time it is checked."""
        return self._registry(path).contract

    def _registry(self, path: str | os.PathLike) -> _Registry:
        from ..contract.registry import display_path, load_registry

        key = os.path.realpath(path)
        if key in self._registries:
            return self._registries[key]
        partial, problems = load_registry(path, default_timeout_s=self.flags.timeout, app_root=self.flags.app_root,
                                          keep_partial=True)
        failed = any(p.level == "error" for p in problems)
        contract = None if failed else partial
        entry = _Registry(contract, partial, _broken_tools(path, partial) if failed else set(), display_path(path))
        self._registries[key] = entry
        self.report.registries += 1
        self._add(problems)
        if contract is not None and self.flags.locked:
            from .lockfile import drift

            self._add(drift(Path(path), contract))
        if contract is not None:  # with a lock beside it: its MCP servers still offer the locked schemas
            from ..contract.mcp import listed, lock_problems, lock_servers, read_locked_hashes, server_key

            self._servers.update(listed(d for d in lock_servers(contract) if server_key(d) not in self._servers))
            self._add(lock_problems(contract, self._servers))
            if read_locked_hashes(contract.file):
                entry.mcp_checked.update(contract.subagents)
        return entry

    def plan(self, path: Path) -> None:
        from ..contract.registry import display_path
        from ..plan.admit import load_plan, registry_path_for

        self.report.plans += 1
        shown = display_path(path)
        decl, col = load_plan(path)
        if decl is None:
            self._unloaded_plan(path, shown, col)
            return
        reg_path = registry_path_for(path, decl, self.flags.registry)
        if reg_path is None:
            col.add("TL412", "the plan names no registry", (), "add 'registry: path/to/registry.yml' or pass --registry")
            self._add(col.problems)
            self.report.partly.append((shown, "it names no registry to check its calls against"))
            return
        if not self._found(reg_path, col):
            self._add(col.problems)
            self.report.partly.append((shown, "its registry cannot be found"))
            return
        reg = self._registry(reg_path)
        contract = reg.contract if reg.contract is not None else reg.partial
        if contract is None:
            self._add(col.problems)
            self.report.partly.append((shown, f"its registry {reg.shown} has errors that stop anything being checked"
                                              " against it"))
            return
        broken = self._partly_checked(shown, decl, col, contract, reg) if reg.contract is None else set()
        if broken is None:
            return
        self._admit(path, decl, col, contract, reg_path, broken)

    def _unloaded_plan(self, path: Path, shown: str, col: Any) -> None:
        """A plan whose own errors stop its calls being checked: its registry is checked all the same."""
        from ..contract.registry import load_document

        raw = load_document(path).data
        named = raw.get("registry") if isinstance(raw, dict) else None
        if isinstance(named, str) or self.flags.registry is not None:
            reg_path = self.flags.registry or str(Path(path).parent / str(named))
            if self._found(reg_path, col):
                self._registry(reg_path)
        self._add(col.problems)
        if isinstance(raw, dict) and "subagents" not in raw:  # a plan (not a registry passed as one)
            self.report.partly.append((shown, "its own errors stop its calls being checked against its registry"))

    def _partly_checked(self, shown: str, decl: Any, col: Any, contract: Any, reg: Any) -> set[str] | None:
        """A plan checked against what compiled of a registry with errors: the broken tools of its
        subagent (whose calls are then not checked), or None when its subagent itself is broken."""
        in_sub = {tool for sid, tool in (t.split("/", 1) for t in reg.broken) if sid == decl.subagent}
        if in_sub and decl.subagent not in contract.subagents:
            self._add(col.problems)
            self.report.partly.append((shown, f"subagent {quoted(decl.subagent)} of its registry {reg.shown}"
                                              " has errors"))
            return None
        broken = sorted(t for t in in_sub if t)
        if broken:
            one = len(broken) == 1
            why = (f"its registry {reg.shown} has errors in {'tool' if one else 'tools'}"
                   f" {listing([quoted(t) for t in broken], 5)}; calls to {'it' if one else 'them'} were not checked")
        else:
            why = f"its registry {reg.shown} has errors"
        self.report.partly.append((shown, why))
        return set(broken)

    def _found(self, reg_path: str, col: Any) -> bool:
        from .._paths import look_at
        from ..plan.admit import registry_missing

        looked = look_at(reg_path)
        found = looked.kind == "file"
        if not found:
            given = "--registry" if self.flags.registry is not None else "registry"
            col.add("TL412", registry_missing(reg_path, looked), ("registry",) if given == "registry" else (),
                    "fix the path (relative to the plan file) or pass --registry")
        return found

    def _admit(self, path: Path, decl: Any, col: Any, contract: Any, reg_path: str, broken: set[str]) -> None:
        """Admission as run does it; with ``broken`` tools (left out of a registry with errors),
        the findings that name them are left out too: they only repeat the registry's."""
        from ..contract.mcp import discovered
        from ..contract.registry import display_path
        from ..errors import ConfigError
        from ..plan.admit import admit_declaration

        # a plan that a registry's plan tool runs is checked as the child run it is (its context
        # comes from the calling plan), as run admits it
        child = decl.context is None and any(
            t.kind == "plan" and os.path.realpath(t.ref) == os.path.realpath(path)
            for sub in contract.subagents.values() for t in sub.tools.values())
        # admission reaches the MCP servers of the plan's subagent (as run does)
        self._registry(reg_path).mcp_checked.add(decl.subagent)
        try:
            discovered(lambda servers: admit_declaration(
                decl, col, contract, shown=display_path(path), registry_path=reg_path, warnings=[],
                max_concurrency=self.flags.max_concurrency, plan_dir=Path(path).parent, depth=1 if child else 0,
                servers=servers), self._servers)
            problems = col.problems  # warnings
        except ConfigError as exc:
            problems = exc.problems
        if broken:
            named = [quoted(t) for t in broken]
            problems = [p for p in problems if not any(n in p.message for n in named)]
        self._add(problems)

    def suite(self, path: Path) -> None:
        """A suite file checked as ``toolloop test`` loads it (nothing runs)."""
        from ..suite.load import load_suite

        self.report.suites += 1
        self._add(load_suite(path)[1])

    def check(self, targets: list[Target]) -> Report:
        from ..contract.mcp import credentials_optional

        with credentials_optional():  # validate does not need MCP client-credential variables set
            return self._check(targets)

    def _check(self, targets: list[Target]) -> Report:
        for t in targets:
            if t.kind == "registry":
                self.registry(t.path)
        for t in targets:
            if t.kind == "plan":
                self.plan(t.path)
        for t in targets:
            if t.kind == "suite":
                self.suite(t.path)
        self.report.problems.sort(key=lambda p: p.sort_key)
        for reg in self._registries.values():
            contract = reg.contract if reg.contract is not None else reg.partial
            if contract is None:
                continue
            unchecked = [f"{sid}/{tid}" for sid, sub in contract.subagents.items() if sid not in reg.mcp_checked
                         for tid, tool in sub.tools.items() if tool.kind == "mcp"]
            if unchecked:
                self.report.mcp_unchecked.append((reg.shown, unchecked))
        return self.report


def _broken_tools(path: str | os.PathLike, partial: Any) -> set[str]:
    """``subagent/tool`` of each tool the registry file declares that did not compile (a whole
    subagent that did not: each of its tools)."""
    from ..contract.registry import load_document

    data = load_document(path).data
    subagents = data.get("subagents") if isinstance(data, dict) else None
    if not isinstance(subagents, dict):
        return set()
    broken = set()
    for sid, sub in subagents.items():
        tools = sub.get("tools") if isinstance(sub, dict) else None
        compiled = partial.subagents.get(sid) if partial is not None else None
        have = set()
        if compiled is not None:
            for tid in compiled.tools:
                have.add(tid)
                have.add(tid.split(".", 1)[0])  # an MCP server's tools are '<id>.<name>'
        for tid in (tools if isinstance(tools, dict) else {}):
            if str(tid) not in have:
                broken.add(f"{sid}/{tid}")
        if compiled is None:
            broken.add(f"{sid}/")
    return broken
