"""MCP tools: one session per server for a run, started on first use, closed when the run ends."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio

from ...contract.compiled import ToolSpec
from ...contract.mcp import server_key, server_params


class McpError(Exception):
    """An MCP tool answered with ``isError``: the receipt is an error with the server's text."""


class McpSessions:
    def __init__(self, nursery: trio.Nursery):
        self._nursery = nursery
        self._sessions: dict[tuple, Any] = {}
        self._locks: dict[tuple, trio.Lock] = {}
        self._closing = trio.Event()

    async def _serve(self, decl: Any, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from mcp import ClientSession
        from mcp.client.stdio import stdio_client

        started = False
        try:
            async with stdio_client(server_params(decl)) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    task_status.started(session)
                    started = True
                    await self._closing.wait()
        except Exception:
            if not started:
                raise  # the call that asked for the session gets it as its error
            # the server died during the run: calls on its session now fail with error receipts

    async def session(self, decl: Any) -> Any:
        key = server_key(decl)
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            if key not in self._sessions:
                self._sessions[key] = await self._nursery.start(self._serve, decl)
        return self._sessions[key]

    async def call(self, tool: ToolSpec, args: dict) -> Any:
        """The tool's result: its structured content when the server gives one, else its
        content items as JSON. Raises McpError for a result flagged ``isError``."""
        session = await self.session(tool.mcp)
        result = await session.call_tool(tool.ref, args)
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise McpError(text or f"MCP tool '{tool.ref}' reported an error")
        structured = getattr(result, "structured_content", None)
        if structured is not None:
            return structured
        return {"content": [c.model_dump(mode="json", exclude_none=True) for c in result.content]}

    def close(self) -> None:
        self._closing.set()


@asynccontextmanager
async def open_mcp_sessions() -> AsyncIterator[McpSessions]:
    """Sessions for the length of a run; servers are stopped when it ends."""
    async with trio.open_nursery() as nursery:
        sessions = McpSessions(nursery)
        try:
            yield sessions
        finally:
            sessions.close()


class McpExecutor:
    """A tool of an MCP server, called over the run's session with that server."""

    name = "mcp"
    abandons = False

    def __init__(self, sessions: McpSessions):
        self.sessions = sessions

    async def prepare(self, tool: ToolSpec, args: dict) -> None:
        return None

    async def run(self, tool: ToolSpec, args: dict, prepared: Any, slot: Any) -> Any:
        return await self.sessions.call(tool, args)
