"""Admission of routed plans (the loop itself lives in the engine)."""

from __future__ import annotations

from ..contract.compiled import SubagentSpec
from ..contract.problems import Collector, did_you_mean
from .models import PlanDecl

PROVIDERS = ("openai", "anthropic", "replay")


def admit_routed(decl: PlanDecl, sub: SubagentSpec, col: Collector) -> None:
    if not decl.goal:
        col.add("TL202", "a routed plan needs a 'goal'", (), "add 'goal: ...'", at_key=True)
    if decl.budget is None:
        col.add("TL410", "a routed plan needs a 'budget' with max_iterations, max_tokens, max_tool_calls and timeout_s",
                (), "add 'budget: {max_iterations: 8, max_tokens: 40000, max_tool_calls: 12, timeout_s: 120}'", at_key=True)
    for key in ("router_profile", "final_profile"):
        prof = getattr(decl, key)
        if prof is None:
            col.add("TL410", f"a routed plan needs '{key}' (provider and model are never defaulted)", (),
                    f"add '{key}: {{provider: ..., model: ...}}'", at_key=True)
            continue
        if prof.provider not in PROVIDERS:
            col.add("TL410", f"unknown provider '{prof.provider}'", (key, "provider"), f"use one of: {', '.join(PROVIDERS)}")
        if not prof.model.strip():
            col.add("TL410", "model is empty", (key, "model"), "name the model explicitly")
    if decl.final_schema is not None:
        from ..contract import schemas

        for spath, message, hint in schemas.meta_errors(decl.final_schema):
            col.add("TL320", f"final_schema is not a valid JSON Schema: {message}", ("final_schema",) + spath, hint)
        for spath, code, message in schemas.check_refs(decl.final_schema):
            col.add(code, message, ("final_schema",) + spath, "use a local reference such as '#/$defs/name'")
    for i, name in enumerate(decl.allowed_tools or []):
        if name not in sub.tools:
            near = did_you_mean(name, sub.tools)
            col.add("TL402", f"unknown tool '{name}' in subagent '{sub.id}'", ("allowed_tools", i),
                    f"did you mean '{near}'?" if near else f"known tools: {', '.join(sorted(sub.tools))}")
        elif name not in sub.allowed_tools:
            col.add("TL411", f"'{name}' is not in the subagent's runner_defaults.allowed_tools", ("allowed_tools", i),
                    "routed allowlists are a subset of the subagent's")
    from importlib import resources

    for name in ("router.md", "final.md"):
        try:
            text = resources.files("toolloop_cli.prompts").joinpath(name).read_text(encoding="utf-8")
        except (FileNotFoundError, OSError):
            text = ""
        if not text.strip():
            col.add("TL415", f"prompt file '{name}' is missing or empty in the installed package", (),
                    "reinstall toolloop; prompts are package data")
