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


def server_plan(registry: Path, subagent: str | None, timeout: float | None) -> AdmittedPlan:
    """The run of ``toolloop mcp serve``: the subagent's allowed tools admitted (their MCP servers
    listed, their child plans admitted, their sandboxes checked) with no call yet, as a run of
    mode ``mcp`` whose calls arrive while it runs. ``subagent`` may be None when the registry has
    one. Raises ConfigError, or UsageError when the subagent must be named."""
    import dataclasses
    import io

    from ..errors import UsageError

    contract, problems = load_registry(registry, default_timeout_s=timeout)
    if contract is None:
        raise ConfigError(problems)
    if subagent is None:
        if len(contract.subagents) != 1:
            raise UsageError(f"{display_path(registry)} has {len(contract.subagents)} subagents"
                             f" ({', '.join(sorted(contract.subagents))}): name one with --subagent")
        subagent = next(iter(contract.subagents))
    decl = PlanDecl(version=1, subagent=subagent, mode="sequential", calls=[])
    admitted = discovered(lambda servers: admit_declaration(
        # an empty lane stream: every allowed tool may be called, as with lanes read at run time
        decl, Collector(SourceMap("<command line>")), contract, shown=f"<mcp serve {subagent}>",
        registry_path=display_path(registry), warnings=[p for p in problems if p.level == "warning"],
        servers=servers, lanes=io.BytesIO(b""),
    ))
    return dataclasses.replace(admitted, mode="mcp")
