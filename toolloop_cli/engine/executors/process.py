"""Sync callables with ``isolation: process``: a warm worker process per call (``procpool``),
taken before the call's deadline starts and killed at the timeout (TERM, a grace period, KILL)."""

from __future__ import annotations

from typing import Any

from ...contract.compiled import ToolSpec


class ProcessExecutor:
    """``fn(**args)`` in a worker process of the run's pool."""

    name = "process"
    abandons = False  # the worker is killed: nothing is left running

    def __init__(self, app_root: str, output_cap_bytes: int):
        self.app_root = app_root
        self.cap = output_cap_bytes

    async def prepare(self, tool: ToolSpec) -> Any:
        # taken (or started) before the deadline runs: the timeout is the call's, not the start's
        from ..procpool import current_pool

        pool = current_pool()
        return pool, await pool.acquire(self.app_root)

    async def run(self, tool: ToolSpec, args: dict, prepared: Any, slot: Any) -> Any:
        pool, worker = prepared
        return await pool.call(worker, tool.ref, args, self.cap)
