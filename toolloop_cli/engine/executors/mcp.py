"""MCP tools: one session per server for a run (over stdio or Streamable HTTP), opened on first
use, closed when the run ends. Each request is bounded by its tool's ``timeout_s``; the values of
an HTTP server's headers are hidden in whatever comes back (results, errors)."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio

from ...contract.compiled import ToolSpec
from ..._secrets import Scrubber
from ...contract.mcp import headers, secrets, server_key, server_params


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

        started = False
        try:
            async with _transport(decl) as (read, write):
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
        hidden = secrets([tool.mcp])
        try:
            session = await self.session(tool.mcp)
            result = await session.call_tool(tool.ref, args, read_timeout_seconds=tool.timeout_s, meta=_meta())
        except McpError:
            raise
        except Exception as exc:
            if hidden and any(h in str(exc) for h in hidden):  # never let a header value through
                raise McpError(_hide(f"{type(exc).__name__}: {exc}", hidden)) from None
            raise
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise McpError(_hide(text, hidden) or f"MCP tool '{tool.ref}' reported an error")
        structured = getattr(result, "structured_content", None)
        if structured is None:
            structured = {"content": [c.model_dump(mode="json", exclude_none=True) for c in result.content]}
        return _hide_deep(structured, hidden) if hidden else structured

    def close(self) -> None:
        self._closing.set()


@asynccontextmanager
async def _transport(decl: Any) -> AsyncIterator[tuple[Any, Any]]:
    """The server's message streams: its process over stdio, or its address over Streamable HTTP
    with the declared headers."""
    if decl.url is None:
        from mcp.client.stdio import stdio_client

        async with stdio_client(server_params(decl)) as (read, write):
            yield read, write
        return
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with create_mcp_http_client(headers=headers(decl)) as client:
        async with streamable_http_client(decl.url, http_client=client) as streams:
            yield streams[0], streams[1]


def _hide(text: str, hidden: list[str]) -> str:
    return Scrubber(hidden).text(text)


def _hide_deep(value: Any, hidden: list[str]) -> Any:
    return Scrubber(hidden).deep(value)


@asynccontextmanager
async def open_mcp_sessions() -> AsyncIterator[McpSessions]:
    """Sessions for the length of a run; servers are stopped when it ends."""
    async with trio.open_nursery() as nursery:
        sessions = McpSessions(nursery)
        try:
            yield sessions
        finally:
            sessions.close()


def _meta() -> Any:
    """The request's ``_meta``: the call's idempotency key as ``toolloop/idempotency_key``, so an
    MCP server can refuse to apply a write twice (the same key on every attempt and resume)."""
    from ..identity import _CURRENT

    ident = _CURRENT.get()
    if ident is None:
        return None
    return {"toolloop/idempotency_key": ident.idempotency_key}


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
