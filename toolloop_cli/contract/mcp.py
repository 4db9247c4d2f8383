"""MCP tools (SPEC 5.8): what a server offers, read once at admission.

A tool's description and schemas come from the server's ``tools/list`` unless the registry pins
them. Admission starts each server that a subagent's MCP tools need, lists its tools, and fills
in the tool specs (validators compiled like any other); the run then keeps one session per
server (``engine/mcp.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .._text import error_text, listing, quoted
from .compiled import SubagentSpec, ToolSpec
from .problems import Problem
from .schemas import check_refs, compile_validator, meta_errors


def client_missing() -> str | None:
    """Why the MCP client (the ``mcp`` extra) cannot be imported, or None when it can."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


def server_key(decl: Any) -> tuple:
    """One server per distinct command line and environment."""
    return (tuple(decl.command), tuple(sorted(decl.env.items())))


def server_params(decl: Any) -> Any:
    import os

    from mcp import StdioServerParameters

    env = dict(os.environ)
    env.update(decl.env)
    return StdioServerParameters(command=decl.command[0], args=list(decl.command[1:]), env=env)


async def list_server_tools(decl: Any) -> dict[str, Any]:
    """Start the server, list its tools, stop it: name -> the SDK's Tool."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    async with stdio_client(server_params(decl)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            answer = await session.list_tools()
    return {tool.name: tool for tool in answer.tools}


def _problem(tool: ToolSpec, message: str, hint: str) -> Problem:
    file, line, col = tool.source
    return Problem("TL313", message, file, line, col, f"subagents.{tool.subagent}.tools.{tool.id}.mcp", hint)


def resolve_server_tools(sub: SubagentSpec) -> list[Problem]:
    """Fill in the MCP tools of ``sub`` from their servers; the problems found (TL313, and
    TL320-TL322 for a server schema that is not valid) are returned. Blocking: call it outside
    an event loop."""
    pending = [t for t in sub.tools.values() if t.kind == "mcp" and t.from_server]
    if not pending:
        return []
    import trio

    try:
        import mcp  # noqa: F401
    except ImportError:
        return [_problem(t, f"tool {quoted(t.id)} comes from an MCP server, and the MCP client is not installed",
                         "pip install 'toolloop-cli[mcp]'") for t in pending]
    by_server: dict[tuple, list[ToolSpec]] = {}
    for t in pending:
        by_server.setdefault(server_key(t.mcp), []).append(t)
    problems: list[Problem] = []
    for tools in by_server.values():
        decl = tools[0].mcp
        try:
            offered = trio.run(list_server_tools, decl)
        except BaseException as exc:  # noqa: BLE001 - a server that fails to start is a finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            first = exc
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            problems += [_problem(t, f"MCP server {quoted(' '.join(decl.command))} for tool {quoted(t.id)} could not be "
                                     f"started or listed: {error_text(first)}",
                                  "check that mcp.command starts the server") for t in tools]
            continue
        for t in tools:
            found = offered.get(t.ref)
            if found is None:
                problems.append(_problem(t, f"MCP server {quoted(' '.join(decl.command))} offers no tool {quoted(t.ref)}",
                                         f"it offers: {listing(sorted(offered)) or 'nothing'}"))
                continue
            fixed, schema_problems = _with_server_schemas(t, found)
            problems += schema_problems
            if fixed is not None:
                sub.tools[t.id] = fixed  # type: ignore[index]  # the subagent's tool table
    return problems


def _with_server_schemas(t: ToolSpec, offered: Any) -> tuple[ToolSpec | None, list[Problem]]:
    changes: dict[str, Any] = {"from_server": frozenset()}
    problems = []
    if "description" in t.from_server:
        changes["description"] = offered.description or ""
    for part, attr, schema in (("input", "input_schema", offered.input_schema),
                               ("output", "output_schema", getattr(offered, "output_schema", None))):
        if part not in t.from_server:
            continue
        schema = schema if schema is not None else {}
        bad = [m for _, m, _ in meta_errors(schema)] + [m for _, _, m in check_refs(schema)]
        if bad:
            problems.append(_problem(t, f"the server's {attr} for {quoted(t.id)} is not usable: {bad[0]}",
                                     f"pin {attr} in the registry"))
            continue
        changes[attr] = schema
        changes[f"{part}_validator"] = compile_validator(schema, mask=bool(t.redact))
    if problems:
        return None, problems
    return replace(t, **changes), []
