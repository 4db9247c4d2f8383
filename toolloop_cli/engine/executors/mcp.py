"""MCP tools: the servers a run calls (over stdio or Streamable HTTP), each started once for the
run: the one admission started to list its tools when this process admitted the plan, else one
started on first use; all are stopped when the run ends. Sessions live on the MCP host loop
(``contract/mcp_servers.py``); a call awaits its request there and cancels it there.

Starting a server is the call's preparation, bounded on its own (``START_TIMEOUT_S``); each
request is bounded by its tool's ``timeout_s``. The values a server gets from toolloop's
environment (HTTP headers, ``pass_env`` variables) are hidden in whatever comes back."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio

from ...contract import mcp_servers
from ...contract.compiled import ToolSpec
from ..._text import quoted
from ...contract.mcp import hide, hide_deep, secrets, server_key, server_name
from ...contract.mcp_servers import Server, ServerError
from . import Executor


class McpError(Exception):
    """An MCP tool answered with ``isError``, or its server could not be started or went away:
    the receipt is an error with the server's text."""


class McpSessions:
    """The servers of one run, by server key."""

    def __init__(self) -> None:
        self._servers: dict[tuple[Any, ...], Server] = {}
        self._locks: dict[tuple[Any, ...], trio.Lock] = {}

    def adopt(self, decls: list[Any]) -> None:
        """Take the servers admission left running for these declarations."""
        for decl in decls:
            key = server_key(decl)
            if key not in self._servers and (server := mcp_servers.take(key)) is not None:
                self._servers[key] = server

    async def server(self, decl: Any) -> Server:
        key = server_key(decl)
        lock = self._locks.setdefault(key, trio.Lock())
        async with lock:
            if key not in self._servers:
                self._servers[key] = await mcp_servers.start(decl)
        return self._servers[key]

    async def call(self, tool: ToolSpec, args: dict[str, Any], server: Server) -> Any:
        """The tool's result: its structured content when the server gives one, else its
        content items as JSON. Raises McpError for a result flagged ``isError``."""
        hidden = secrets([tool.mcp])
        if not server.alive:
            raise McpError(server.stopped())
        try:
            result = await mcp_servers.on_host(_call_tool, server, tool.ref, args, tool.timeout_s, _meta())
        except Exception as exc:
            if not server.alive or await mcp_servers.gone(server):
                raise McpError(server.stopped()) from None
            if server.http_status is not None or (server.auth is not None and server.auth.failure is not None):
                raise McpError(server.why(exc, "answer")) from None
            said = f"{type(exc).__name__}: {exc}"
            if hidden and hide(said, hidden) != said:  # never let a secret through, however it is quoted
                raise McpError(hide(said, hidden)) from None
            raise
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content).strip()
            raise McpError(hide(text, hidden) or f"MCP tool '{tool.ref}' reported an error")
        structured = getattr(result, "structured_content", None)
        if structured is None:
            structured = {"content": [c.model_dump(mode="json", exclude_none=True) for c in result.content]}
        return hide_deep(structured, hidden) if hidden else structured

    async def aclose(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for server in servers:
                    nursery.start_soon(mcp_servers.close, server)


@asynccontextmanager
async def open_mcp_sessions(decls: list[Any] | None = None) -> AsyncIterator[McpSessions]:
    """The servers of a run (those admission started for ``decls`` taken at once); stopped
    when it ends."""
    sessions = McpSessions()
    sessions.adopt(decls or [])
    try:
        yield sessions
    finally:
        await sessions.aclose()


async def _call_tool(server: Server, name: str, args: dict[str, Any], timeout_s: float | None, meta: Any) -> Any:
    """``tools/call`` on the server's session (on the MCP host loop)."""
    return await server.session.call_tool(name, args, read_timeout_seconds=timeout_s, meta=meta)


def _meta() -> Any:
    """The request's ``_meta``: the call's idempotency key as ``toolloop/idempotency_key``, so an
    MCP server can refuse to apply a write twice (the same key on every attempt and resume)."""
    from ..identity import current_identity

    ident = current_identity()
    if ident is None:
        return None
    return {"toolloop/idempotency_key": ident.idempotency_key}


class McpExecutor(Executor):
    """A tool of an MCP server, called over the run's session with that server."""

    name = "mcp"

    def __init__(self, sessions: McpSessions):
        self.sessions = sessions

    async def prepare(self, tool: ToolSpec, args: dict[str, Any]) -> Server | ServerError:
        """The tool's server, started if need be: before the call's deadline runs."""
        try:
            return await self.sessions.server(tool.mcp)
        except ServerError as exc:  # the call's receipt says it
            return exc

    async def run(self, tool: ToolSpec, args: dict[str, Any], prepared: Server | ServerError, slot: Any) -> Any:
        if isinstance(prepared, ServerError):
            how = "reached" if tool.mcp.url is not None else "started"
            raise McpError(f"MCP server {quoted(server_name(tool.mcp))} could not be {how}: {prepared}") from None
        return await self.sessions.call(tool, args, prepared)


def make(run: Any) -> McpExecutor:
    return McpExecutor(run.mcp_sessions)
