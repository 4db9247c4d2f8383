"""``toolloop call``: one ad-hoc call, admitted as a one-call sequential plan."""

from __future__ import annotations

from pathlib import Path

from ..contract.mcp import discovered
from ..contract.problems import Collector
from ..contract.registry import display_path, load_registry
from ..contract.source import SourceMap
from ..errors import ConfigError
from ..plan.admit import AdmittedPlan, admit_declaration
from ..plan.models import CallDecl, PlanDecl


def adhoc_plan(registry: Path, subagent: str, tool: str, args: dict, timeout: float | None) -> AdmittedPlan:
    contract, problems = load_registry(registry, default_timeout_s=timeout)
    if contract is None:
        raise ConfigError(problems)
    decl = PlanDecl(version=1, subagent=subagent, mode="sequential", calls=[CallDecl(tool=tool, args=args)])
    return discovered(lambda servers: admit_declaration(
        decl, Collector(SourceMap("<command line>")), contract, shown=f"<call {subagent}/{tool}>",
        registry_path=display_path(registry), warnings=[p for p in problems if p.level == "warning"], servers=servers,
    ))
