"""Checking registries and plans as ``run`` will: each plan against the registry it names (or
``--registry``), loaded with the same flags (``--timeout``, ``--app-root``) and admitted with the
same admission (``--max-concurrency``), so a plan that passes is never rejected by ``run`` on the
same files. Each registry is checked once, however many plans name it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


class Checker:
    def __init__(self, flags: Flags):
        self.flags = flags
        self.report = Report()
        self._registries: dict[str, Any] = {}  # resolved path -> compiled contract (None when rejected)
        self._seen: set[Problem] = set()

    def _add(self, problems: list[Problem]) -> None:
        for p in problems:
            if p not in self._seen:
                self._seen.add(p)
                self.report.problems.append(p)

    def registry(self, path: str | os.PathLike) -> Any:
        """The compiled contract of a registry (None when it has errors); its findings are
        reported the first time it is checked."""
        from ..contract.registry import load_registry

        key = os.path.realpath(path)
        if key in self._registries:
            return self._registries[key]
        contract, problems = load_registry(path, default_timeout_s=self.flags.timeout, app_root=self.flags.app_root)
        self._registries[key] = contract
        self.report.registries += 1
        self._add(problems)
        if contract is not None and self.flags.locked:
            from .lockfile import drift

            self._add(drift(Path(path), contract))
        if contract is not None:  # with a lock beside it: its MCP servers still offer the locked schemas
            from ..contract.mcp import lock_problems

            self._add(lock_problems(contract))
        return contract

    def plan(self, path: Path) -> None:
        from ..contract.registry import display_path
        from ..errors import ConfigError
        from .._paths import look_at
        from ..plan.admit import admit_declaration, load_plan, registry_missing, registry_path_for

        self.report.plans += 1
        decl, col = load_plan(path)
        if decl is None:
            self._add(col.problems)
            return
        reg_path = registry_path_for(path, decl, self.flags.registry)
        if reg_path is None:
            col.add("TL412", "the plan names no registry", (), "add 'registry: path/to/registry.yml' or pass --registry")
            self._add(col.problems)
            return
        looked = look_at(reg_path)
        if looked.kind != "file":
            given = "--registry" if self.flags.registry is not None else "registry"
            col.add("TL412", registry_missing(reg_path, looked), ("registry",) if given == "registry" else (),
                    "fix the path (relative to the plan file) or pass --registry")
            self._add(col.problems)
            return
        contract = self.registry(reg_path)
        if contract is None:
            return  # the registry's own findings say why; run would refuse the plan for them
        # a plan that a registry's plan tool runs is checked as the child run it is (its context
        # comes from the calling plan), as run admits it
        child = decl.context is None and any(
            t.kind == "plan" and os.path.realpath(t.ref) == os.path.realpath(path)
            for sub in contract.subagents.values() for t in sub.tools.values())
        try:
            admit_declaration(decl, col, contract, shown=display_path(path), registry_path=reg_path, warnings=[],
                              max_concurrency=self.flags.max_concurrency, plan_dir=Path(path).parent,
                              depth=1 if child else 0)
        except ConfigError as exc:
            self._add(exc.problems)
            return
        self._add(col.problems)  # warnings

    def check(self, targets: list[Target]) -> Report:
        for t in targets:
            if t.kind == "registry":
                self.registry(t.path)
        for t in targets:
            if t.kind == "plan":
                self.plan(t.path)
        self.report.problems.sort(key=lambda p: p.sort_key)
        return self.report
