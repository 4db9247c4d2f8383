"""Reading a suite file into its cases, every problem a finding with file, line and column.

A suite is checked whole before any case runs: its keys, each case's plan and fixture (paths
relative to the suite file), the tools its expectations and faults name (against the registry its
plan names) and what a batch plan can be asked. Nothing here runs anything or opens the journal,
so ``validate`` checks suite files with the same code."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from .._paths import look_at
from .._text import excerpt, quoted
from ..contract.document import display_path, load_document
from ..contract.problems import Collector, Problem, did_you_mean, not_a
from ..contract.validation import report_model_errors
from .fixture import Fixture, FixtureError, load_fixture
from .models import BATCH_EXPECTATIONS, CaseDecl, SuiteDecl


@dataclass(frozen=True)
class Case:
    """One case as it will run: its declaration and its files resolved."""

    suite: str  # the suite file as shown
    suite_name: str  # the suite file's name, for the run's label
    index: int
    decl: CaseDecl
    plan_path: str
    mode: str | None  # the plan's mode; None when the plan cannot be read (the case errors)
    fixture_path: str | None
    fixture: Fixture | None = None

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def label(self) -> str:
        return f"{self.suite_name}:{self.decl.name}"


@dataclass
class Suite:
    path: str  # as shown
    cases: list[Case] = field(default_factory=list)


def load_suite(path: str | os.PathLike[str], *, recording: bool = False) -> tuple[Suite | None, list[Problem]]:
    """The suite at ``path`` and every finding about it (None when any is an error). With
    ``recording`` (``--record``) a fixture need not exist yet: the run writes it."""
    doc = load_document(path)
    col = doc.collector
    shown = display_path(path)
    if doc.data is None:
        return None, col.problems
    if not_a("suite", doc.data, col, SuiteDecl.model_fields,
             "pass a suite: a YAML file with 'version: 1', 'kind: suite' and 'cases:'"):
        return None, col.problems
    if doc.data.get("kind") != "suite":
        found = quoted(doc.data["kind"]) if "kind" in doc.data else "no 'kind'"
        col.add("TL106", f"a suite file says 'kind: suite'; this one has {found}", ("kind",) if "kind" in doc.data
                else (), "add 'kind: suite' at the top level", at_key="kind" not in doc.data)
        return None, col.problems
    try:
        decl = SuiteDecl.model_validate(doc.data)
    except ValidationError as exc:
        report_model_errors(exc, SuiteDecl, col, data=doc.data)
        return None, col.problems
    if col.has_errors:
        return None, col.problems
    base = FsPath(path).parent
    suite = Suite(shown)
    extra: list[Problem] = []
    names: dict[str, int] = {}
    for i, case in enumerate(decl.cases):
        if case.name in names:
            col.add("TL504", f"case name {quoted(case.name)} is used twice (first at cases[{names[case.name]}])",
                    ("cases", i, "name"), "give every case a name of its own")
        names.setdefault(case.name, i)
        checked = _case(case, i, base, shown, FsPath(path).name, col, extra, recording)
        if checked is not None:
            suite.cases.append(checked)
    problems = col.problems + extra
    if any(p.level == "error" for p in problems):
        return None, problems
    return suite, problems


def _case(case: CaseDecl, i: int, base: FsPath, shown: str, name: str, col: Collector,
          extra: list[Problem], recording: bool) -> Case | None:
    at = ("cases", i)
    plan_path = str(base / case.plan)
    if not _exists(plan_path, case.plan, at + ("plan",), "plan", col):
        return None
    plan = load_document(plan_path).data
    mode = plan.get("mode") if isinstance(plan, dict) and isinstance(plan.get("mode"), str) else None
    fixture_path = str(base / case.fixture) if case.fixture is not None else None
    fixture = None
    if mode in ("sequential", "parallel"):
        _batch_case(case, at, col)
    elif recording:
        pass  # --record writes the fixture before the case reads it
    elif fixture_path is not None and _exists(fixture_path, case.fixture or "", at + ("fixture",), "fixture", col):
        try:
            fixture = load_fixture(fixture_path)
        except FixtureError as exc:
            extra.append(Problem("TL421", exc.message, display_path(exc.path), max(exc.line, 1), 1,
                                 hint="use the JSON Lines written by `toolloop runs export RUN_ID` as the fixture"))
    if case.faults and case.fixture is None:
        col.add("TL503", "faults are laid over a fixture's tool results; this case has no fixture",
                at + ("faults",), "add 'fixture:' (a runs export file), or remove 'faults'", at_key=True)
    _tools_named(case, at, plan, FsPath(plan_path).parent, col)
    return Case(shown, name, i, case, plan_path, mode, fixture_path, fixture)


def _exists(path: str, given: str, at: tuple, what: str, col: Collector) -> bool:
    looked = look_at(path)
    if looked.kind == "file":
        return True
    why = {"folder": "is a folder, not a file", "missing": "not found"}.get(looked.kind, looked.why or "is not a file")
    col.add("TL501", f"{what} {excerpt(given)} {why}", at, "fix the path: it is relative to the suite file")
    return False


def _batch_case(case: CaseDecl, at: tuple, col: Collector) -> None:
    """A batch plan runs live and is judged by its receipts only."""
    for key in ("context", "fixture", "faults"):
        if getattr(case, key) is not None:
            col.add("TL503", f"{quoted(key)} does not apply to a batch plan (it runs live; only "
                             f"{', '.join(BATCH_EXPECTATIONS)} are checked)", at + (key,),
                    f"remove '{key}', or point the case at a routed plan", at_key=True)
    if case.tools != "recorded":
        col.add("TL503", "'tools' does not apply to a batch plan (it runs live)", at + ("tools",),
                "remove 'tools'", at_key=True)
    if case.expect is None:
        return
    for key in type(case.expect).model_fields:
        if key not in BATCH_EXPECTATIONS and getattr(case.expect, key) is not None:
            col.add("TL503", f"expectation {quoted(key)} needs a routed plan; a batch case checks only "
                             f"{', '.join(BATCH_EXPECTATIONS)}", at + ("expect", key),
                    f"remove '{key}', or point the case at a routed plan", at_key=True)


def _tools_named(case: CaseDecl, at: tuple, plan: Any, plan_dir: FsPath, col: Collector) -> None:
    """Each tool an expectation or fault names is one the plan's registry has (its subagent's)."""
    known = _registry_tools(plan, plan_dir)
    if known is None:  # the plan or its registry cannot be read: running the case says why
        return
    named: list[tuple[str, tuple]] = []
    if case.expect is not None:
        named += [(c.tool, at + ("expect", "calls", j, "tool")) for j, c in enumerate(case.expect.calls or [])]
        named += [(t, at + ("expect", "never", j)) for j, t in enumerate(case.expect.never or [])]
    named += [(f.tool, at + ("faults", j, "tool")) for j, f in enumerate(case.faults or [])]
    for tool, where in named:
        if tool not in known and tool.split(".", 1)[0] not in known:
            near = did_you_mean(tool, known)
            col.add("TL502", f"tool {quoted(tool)} is not in the plan's registry (subagent "
                             f"{quoted(plan.get('subagent'))})", where,
                    f"did you mean {quoted(near)}?" if near else "name a tool of the plan's subagent")


def _registry_tools(plan: Any, plan_dir: FsPath) -> set[str] | None:
    if not isinstance(plan, dict) or not isinstance(plan.get("registry"), str):
        return None
    data = load_document(plan_dir / plan["registry"]).data
    subagents = data.get("subagents") if isinstance(data, dict) else None
    sub = subagents.get(plan.get("subagent")) if isinstance(subagents, dict) else None
    tools = sub.get("tools") if isinstance(sub, dict) else None
    return {str(t) for t in tools} if isinstance(tools, dict) else None
