"""Async callables written for trio run on the engine's own event loop and are cancelled at
their deadline."""

from __future__ import annotations

from typing import Any

from ...contract.compiled import ToolSpec


class TrioExecutor:
    """``await fn(**args)`` in the calling task."""

    name = "trio"
    abandons = False

    async def prepare(self, tool: ToolSpec) -> None:
        return None

    async def run(self, tool: ToolSpec, args: dict, prepared: Any, slot: Any) -> Any:
        return await tool.fn(**args)  # type: ignore[misc]
