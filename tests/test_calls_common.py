"""Helpers shared by the one-call tests: a registry of the test App's tools written on the fly,
plans built from it, and in-process runs (under trio's mock clock when asked)."""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from conftest import APP, write
from toolloop_cli.contract.registry import load_registry
from toolloop_cli.engine import RunContext, run_lanes
from toolloop_cli.plan.admit import admit_plan

OPEN: dict = {}


def tool(fn: str, **extra) -> dict:
    """A registry entry for ``testapp.tools:<fn>`` with open schemas unless given."""
    return {"callable": f"testapp.tools:{fn}", "description": fn,
            "input_schema": extra.pop("input_schema", {}), "output_schema": extra.pop("output_schema", {}), **extra}


def registry_file(tmp_path: Path, tools: dict, *, timeout: float = 5, evidence: str | None = None,
                  name: str = "registry.yml") -> Path:
    body: dict = {"version": 1, "app_root": str(APP),
                  "subagents": {"g": {"runner_defaults": {"tool_timeout_s": timeout}, "tools": tools}}}
    if evidence:
        body["evidence"] = evidence
    return write(tmp_path / name, json.dumps(body))


def contract_of(tmp_path: Path, tools: dict, **kw):
    contract, problems = load_registry(registry_file(tmp_path, tools, **kw))
    assert contract is not None, [str(p) for p in problems]
    return contract


def plan_file(tmp_path: Path, tools: dict, *, calls: list[dict] | None = None, lanes: list[dict] | None = None,
              mc: int = 4, name: str = "plan.yml", **kw) -> Path:
    reg = registry_file(tmp_path, tools, **kw)
    if calls is not None:
        body = {"version": 1, "registry": str(reg), "subagent": "g", "mode": "sequential", "calls": calls}
    else:
        body = {"version": 1, "registry": str(reg), "subagent": "g", "mode": "parallel",
                "max_concurrency": mc, "lanes": lanes}
    return write(tmp_path / name, json.dumps(body))


def admitted(tmp_path: Path, tools: dict, **kw):
    from toolloop_cli.errors import ConfigError

    try:
        return admit_plan(plan_file(tmp_path, tools, **kw))
    except ConfigError as exc:
        raise AssertionError("\n".join(f"{p.code} {p.path} {p.message}" for p in exc.problems)) from None


def run_plan(plan, *, mc: int | None = None, mock: bool = True, audit: list | None = None, seed: int | None = None,
             **ctx_kw):
    """Run an admitted plan in-process; returns (receipt records in output order, ctx, state)."""
    from toolloop_cli.engine import RunServices

    services = RunServices(audit=audit.append if audit is not None else None,
                           **{k: ctx_kw.pop(k) for k in ("cache", "approvals", "ask") if k in ctx_kw})
    ctx = RunContext("run-test", plan.contract, services=services, **ctx_kw)
    if seed is not None:
        services.rng.seed(seed)
    got: list = []

    async def main():
        return await run_lanes(ctx, plan.lanes, mc or plan.max_concurrency, lambda r: got.append(r.as_record()))

    kw = {"clock": trio.testing.MockClock(autojump_threshold=0)} if mock else {}
    state = trio.run(main, **kw)
    return got, ctx, state


def by_key(records: list[dict]) -> dict:
    return {(r["item_key"], r["call_key"]): r for r in records if r.get("parent_receipt_id") is None}
