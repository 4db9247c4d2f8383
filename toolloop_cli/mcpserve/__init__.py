"""``toolloop mcp serve``: a subagent's allowed tools offered to any MCP client, every call
governed and journaled (the ``mcp`` extra).

- ``listing``: what a client is shown of each tool (schemas and annotations from the contract),
  and a receipt turned into an MCP tool result;
- ``runner``: the server's run (mode ``mcp``, one per server process): each ``tools/call`` passes
  the same gates as any call, runs through the engine's call path and is settled as a receipt;
- ``transports``: standard input and output, or the Streamable HTTP transport behind the guard
  (``guard``: the bearer token, ``Host`` and ``Origin``).

The run is composed by ``engine/launch.py`` (``Launch.mcp_server``); the command line only parses
flags and prints what a person needs.
"""

from __future__ import annotations

INSTALL = "pip install 'toolloop-cli[mcp]'"


def missing_extra(transport: str = "stdio") -> str | None:
    """The first module ``toolloop mcp serve`` needs over ``transport`` that cannot be imported."""
    needed = ["mcp", "mcp_types"] + (["starlette", "hypercorn"] if transport == "http" else [])
    for name in needed:
        try:
            __import__(name)
        except ImportError:
            return name
    return None
