"""``toolloop call``: one ad-hoc call admitted like a one-call sequential plan."""

from __future__ import annotations

from pathlib import Path

from .._canonical import sha256_of
from ..contract.problems import Problem, did_you_mean
from ..contract.registry import display_path, load_registry
from ..contract.schemas import schema_errors
from ..errors import ConfigError
from ..plan.admit import AdmittedCall, AdmittedLane, AdmittedPlan
from ..plan.models import CallDecl, PlanDecl


def adhoc_plan(registry: Path, subagent: str, tool: str, args: dict, timeout: float | None) -> AdmittedPlan:
    contract, problems = load_registry(registry, default_timeout_s=timeout)
    if contract is None:
        raise ConfigError(problems)
    sub = contract.subagents.get(subagent)
    if sub is None:
        near = did_you_mean(subagent, contract.subagents)
        raise ConfigError([Problem("TL401", f"unknown subagent '{subagent}'", "<command line>",
                                   hint=f"did you mean '{near}'?" if near else "")])
    from ..contract.mcp import resolve_server_tools

    server_problems = resolve_server_tools(sub)
    if server_problems:
        raise ConfigError(server_problems)
    spec = sub.tools.get(tool)
    if spec is None:
        near = did_you_mean(tool, sub.tools)
        raise ConfigError([Problem("TL402", f"unknown tool '{tool}' in subagent '{subagent}'", "<command line>",
                                   hint=f"did you mean '{near}'?" if near else "")])
    if tool not in sub.allowed_tools:
        raise ConfigError([Problem("TL403", f"tool '{tool}' is not in runner_defaults.allowed_tools", "<command line>")])
    if spec.input_validator is not None and not spec.input_validator.is_valid(args):
        raise ConfigError([Problem("TL404", f"--args fail the input_schema of '{tool}': {m}", "--args")
                           for m in schema_errors(spec.input_validator, args, limit=5)])
    call = AdmittedCall(0, 0, None, "0", spec, args, sha256_of(args))
    decl = PlanDecl(version=1, subagent=subagent, mode="sequential", calls=[CallDecl(tool=tool, args=args)])
    return AdmittedPlan(
        path=f"<call {subagent}/{tool}>", decl=decl, contract=contract, subagent=sub, mode="sequential",
        lanes=[AdmittedLane(0, None, None, [call])], max_concurrency=1,
        plan_sha256=sha256_of(decl.model_dump(mode="json")), registry_path=display_path(registry),
        warnings=[p for p in problems if p.level == "warning"],
    )
