"""What an MCP client is shown of a subagent's tools, and a receipt as an MCP tool result.

Each allowed tool is listed with its id as name, its description, its input schema (an open one
as an empty object schema, which MCP requires), its output schema when the contract closes it
to JSON objects (MCP's ``outputSchema`` describes ``structuredContent``, which is always an
object), and the three annotations from its effect, always sent.
"""

from __future__ import annotations

from typing import Any

from .._json import dumps_text

#: the MCP specification's default input schema: an object, any properties
OPEN_INPUT: dict[str, Any] = {"type": "object"}


def output_schema_of(tool: Any) -> dict[str, Any] | None:
    """The tool's ``outputSchema`` for MCP: its output schema when it is closed and says its
    results are objects; None otherwise (an open schema, or results that may be other values)."""
    schema = tool.output_schema
    if isinstance(schema, dict) and schema and schema.get("type") == "object":
        return schema
    return None


def input_schema_of(tool: Any) -> dict[str, Any]:
    schema = tool.input_schema
    if isinstance(schema, dict) and schema:
        return schema if "type" in schema else {"type": "object", **schema}
    return dict(OPEN_INPUT)


def annotations_of(tool: Any) -> dict[str, bool]:
    """``readOnlyHint`` for effect ``read``, ``destructiveHint`` for ``destructive``,
    ``idempotentHint`` for ``idempotent: true``: all three always sent, so a client never falls
    back on MCP's defaults (which take an unannotated tool for a destructive one)."""
    return {"readOnlyHint": tool.effect == "read", "destructiveHint": tool.effect == "destructive",
            "idempotentHint": bool(tool.idempotent)}


def listed_tools(subagent: Any) -> list[Any]:
    """The subagent's allowed tools as MCP ``Tool`` objects, in the order the registry allows them."""
    import mcp_types as types

    out = []
    for tool_id in subagent.allowed_tools:
        tool = subagent.tools.get(tool_id)
        if tool is None:
            continue
        hints = annotations_of(tool)
        out.append(types.Tool(
            name=tool.id, description=tool.description or None, input_schema=input_schema_of(tool),
            output_schema=output_schema_of(tool),
            annotations=types.ToolAnnotations(read_only_hint=hints["readOnlyHint"],
                                              destructive_hint=hints["destructiveHint"],
                                              idempotent_hint=hints["idempotentHint"])))
    return out


def error_result(text: str) -> Any:
    """An ``isError`` result carrying ``text`` (a call that did not run, or did not end ``ok``)."""
    import mcp_types as types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def receipt_result(receipt: Any) -> Any:
    """A receipt as the MCP result of its call: an ``ok`` receipt's (redacted) result as JSON text,
    and as ``structuredContent`` when it is a JSON object; any other status an ``isError`` result
    carrying the status and the receipt's message."""
    import mcp_types as types

    if receipt.status != "ok":
        message = (receipt.error or {}).get("message") or ""
        return error_result(f"{receipt.status}: {message}" if message else receipt.status)
    value = receipt.result
    content: list[Any] = [types.TextContent(type="text", text=dumps_text(value))]
    if isinstance(value, dict):
        return types.CallToolResult(content=content, structured_content=value, is_error=False)
    return types.CallToolResult(content=content, is_error=False)
