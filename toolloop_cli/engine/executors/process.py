"""Sync callables with ``isolation: process``: a warm worker process per call (``procpool``),
taken, and the callable's module imported in it, before the call's deadline starts; at the
timeout the worker's whole process group is killed (TERM, a grace period, KILL)."""

from __future__ import annotations

from typing import Any

from ...contract.compiled import ToolSpec
from . import Executor


class ProcessExecutor(Executor):
    """``fn(**args)`` in a worker process of the run's pool."""

    name = "process"
    abandons = False  # the worker is killed: nothing is left running
    copies_arguments = True  # they reach the worker as bytes

    def __init__(self, app_root: str, output_cap_bytes: int):
        self.app_root = app_root
        self.cap = output_cap_bytes

    def launcher(self, tool: ToolSpec) -> Any:
        """How the tool's workers are started: None for a plain worker process (a sandbox's
        executor starts them inside one, ``sandbox.py``)."""
        return None

    async def prepare(self, tool: ToolSpec, args: dict[str, Any]) -> Any:
        # taken (or started) and the module imported before the deadline runs: the timeout is
        # the call's, not the start's or the import's (bounded by procpool.IMPORT_LIMIT_S)
        from ..procpool import current_pool

        pool = current_pool()
        worker, failure = await pool.ready(self.app_root, tool.ref, self.launcher(tool))
        return pool, worker, failure

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Any, slot: Any) -> Any:
        pool, worker, failure = prepared
        if failure is not None:  # the import failed: the call's failure, reported inside its deadline
            raise failure
        from ..identity import current_identity

        ident = current_identity()  # current_call() in the worker: the call's identity goes with it
        shipped = None if ident is None else (ident.run_id, ident.seq, ident.item_key, ident.call_key, ident.attempt,
                                               dict(ident.labels), ident.idempotency_key, ident.receipt_id)
        return await pool.call(worker, tool.ref, args, self.cap, shipped)


def make(run: Any) -> ProcessExecutor:
    return ProcessExecutor(run.app_root, run.output_cap_bytes)
