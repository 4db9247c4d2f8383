"""toolloop: governed execution of registered callables from declarative plans.

The public Python API. Names are loaded on first use so that importing the package (and
starting the command line) stays fast.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AdmittedPlan",
    "ConfigError",
    "Contract",
    "DispatchError",
    "HaltPolicy",
    "Problem",
    "Receipt",
    "RunError",
    "RunOptions",
    "StateError",
    "Store",
    "ToolSpec",
    "ToolloopError",
    "UsageError",
    "admit_plan",
    "asyncio_tool",
    "current_call",
    "dispatch",
    "execute_plan",
    "load_registry",
    "run_batch",
    "run_parallel_batch",
]

_WHERE = {
    "AdmittedPlan": "toolloop_cli.plan.admit",
    "ConfigError": "toolloop_cli.errors",
    "Contract": "toolloop_cli.contract.compiled",
    "DispatchError": "toolloop_cli.errors",
    "HaltPolicy": "toolloop_cli.engine.runstate",
    "Problem": "toolloop_cli.contract.problems",
    "Receipt": "toolloop_cli.receipts",
    "RunError": "toolloop_cli.errors",
    "RunOptions": "toolloop_cli.engine.session",
    "StateError": "toolloop_cli.errors",
    "Store": "toolloop_cli.store",
    "ToolSpec": "toolloop_cli.contract.compiled",
    "ToolloopError": "toolloop_cli.errors",
    "UsageError": "toolloop_cli.errors",
    "admit_plan": "toolloop_cli.plan.admit",
    "asyncio_tool": "toolloop_cli.engine.executors.asyncio_loop",
    "current_call": "toolloop_cli.engine.identity",
    "dispatch": "toolloop_cli.engine.dispatch",
    "execute_plan": "toolloop_cli.engine.run",
    "load_registry": "toolloop_cli.contract.registry",
    "run_batch": "toolloop_cli.engine.lanes",
    "run_parallel_batch": "toolloop_cli.engine.lanes",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'toolloop_cli' has no attribute '{name}'")
    import importlib

    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
