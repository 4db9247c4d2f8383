"""Child plans (agents as tools): the routed plans a plan's ``plan:`` tools run, admitted with it.

A rejected child rejects its parent (the child's own findings are reported with its file's lines);
a child plan must be routed and carry no ``context:`` (its parent's call supplies it); nesting is
capped by the top plan's subagent ``runner_defaults.max_depth`` (the top plan is depth 0, so
``max_depth: 2`` allows a child and a grandchild). A plan tool whose registry entry declares no
``effect`` takes the strongest effect among its child's allowed tools.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..contract.compiled import Contract, SubagentSpec, ToolSpec
from ..contract.problems import Problem
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..contract.mcp import Listing
    from .admit import AdmittedPlan

_STRENGTH = {"read": 0, "write": 1, "destructive": 2}


def admit_children(contract: Contract, sub: SubagentSpec, *, usable: set[str], depth: int, max_depth: int,
                   servers: Listing | None = None) -> tuple[Contract, SubagentSpec, dict[str, AdmittedPlan], list[Problem]]:
    """The child plans of the ``plan:`` tools the plan may call (``usable``) admitted (by absolute
    path), the contract with their tools' effects set, and the problems that reject the parent.
    ``servers``: what the MCP discovery step found (``ServersNeeded`` goes up to the caller that
    runs it, when a child's registry needs a server it lacks)."""
    from .admit import admit_plan

    servers = {} if servers is None else servers  # inside admission nothing is listed: ServersNeeded goes up
    plans: dict[str, AdmittedPlan] = {}
    problems: list[Problem] = []
    tools = dict(sub.tools)
    for tid, tool in sub.tools.items():
        if tool.kind != "plan" or tid not in usable:
            continue
        if depth + 1 > max_depth:
            problems.append(_problem(tool, f"plan tool '{tid}' would nest a child plan at depth {depth + 1},"
                                           f" past runner_defaults.max_depth ({max_depth})"))
            continue
        try:
            child = plans.get(tool.ref) or admit_plan(tool.ref, depth=depth + 1, max_depth=max_depth,
                                                       servers=servers)
        except ConfigError as exc:
            problems.append(_problem(tool, f"plan tool '{tid}': its child plan is rejected"))
            problems.extend(exc.problems)
            continue
        if child.mode != "routed" or child.decl.context is not None:
            why = "is not a routed plan" if child.mode != "routed" else "carries its own context (its parent supplies it)"
            problems.append(_problem(tool, f"plan tool '{tid}': its child plan {why}"))
            continue
        plans[tool.ref] = child
        plans.update(child.child_plans)
        if tool.effect == "":
            effect = max((child.subagent.tools[t].effect or "write" for t in child.routed.tools),  # type: ignore[union-attr]
                         key=lambda e: _STRENGTH.get(e, 1), default="read")
            tools[tid] = dataclasses.replace(tool, effect=effect)
    if tools != dict(sub.tools):
        sub = dataclasses.replace(sub, tools=tools)
        contract = dataclasses.replace(contract, subagents={**contract.subagents, sub.id: sub})
    return contract, sub, plans, problems


def _problem(tool: ToolSpec, message: str) -> Problem:
    file, line, col = tool.source
    return Problem("TL422", message, file, line, col, hint="see the child plan's own findings, if any")
