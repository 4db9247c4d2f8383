"""An MCP server over Streamable HTTP for the tests: the ``mcp`` SDK's own server (MCPServer, the
former FastMCP) on 127.0.0.1, behind a required header.

Usage: python tests/mcp_http_server.py [--variant 2]

Prints the port it listens on, then serves until killed. Every request must carry the header
``X-Api-Key`` with the value of the environment variable ``MCP_TEST_TOKEN`` (else 401). Tools carry
annotations (read-only, additive and idempotent, destructive, none at all); ``whoami`` answers with
the token itself (so a client must hide it); ``--variant 2`` changes the input schema of
``lookup`` (a server whose tools changed since it was locked).
"""

from __future__ import annotations

import os
import socket
import sys
import time

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

TOKEN = os.environ["MCP_TEST_TOKEN"]
VARIANT = 2 if "--variant" in sys.argv and sys.argv[sys.argv.index("--variant") + 1] == "2" else 1

server = MCPServer("toolloop-test", log_level="WARNING")
CALLS: dict[str, int] = {}


def _count(name: str) -> int:
    CALLS[name] = CALLS.get(name, 0) + 1
    return CALLS[name]


if VARIANT == 1:
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(q: str) -> dict:
        """Look a ticket up."""
        return {"q": q, "found": True}
else:
    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(q: str, limit: int) -> dict:  # type: ignore[no-redef]
        """Look a ticket up (now with a limit)."""
        return {"q": q, "found": True, "limit": limit}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
def add_comment(ticket: str, text: str) -> dict:
    """Add a comment to a ticket."""
    return {"ticket": ticket, "comment": text, "n": _count("add_comment")}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def request_meta(ctx: Context) -> dict:
    """What the request's _meta carried (the client's idempotency key)."""
    meta = getattr(ctx.request_context, "meta", None)
    data = meta.model_dump(by_alias=True, exclude_none=True) if hasattr(meta, "model_dump") else dict(meta or {})
    return {"key": data.get("toolloop/idempotency_key")}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_ticket(ticket: str) -> dict:
    """Delete a ticket."""
    return {"deleted": ticket}


@server.tool()
def no_hints(x: int) -> dict:
    """A tool without annotations."""
    return {"x": x}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float) -> dict:
    """Answer after a while."""
    await anyio.sleep(seconds)
    return {"slept": seconds}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> dict:
    """Say which token the caller used (a careless server)."""
    return {"token": TOKEN, "at": time.time()}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail_loudly() -> dict:
    """Fail, quoting the token in the error."""
    raise ToolError(f"token {TOKEN} is not allowed here")


def require_header(app):  # an ASGI middleware: no X-Api-Key (or Authorization: Bearer), no MCP
    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            given = headers.get(b"x-api-key", b"").decode()
            bearer = headers.get(b"authorization", b"").decode()
            if given != TOKEN and bearer != f"Bearer {TOKEN}":
                body = b'{"error": "missing or wrong X-Api-Key"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # before the port is said: a client may connect at once
    app = require_header(server.streamable_http_app())
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
