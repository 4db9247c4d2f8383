"""An MCP server over Streamable HTTP that takes OAuth client-credential tokens, with its own
authorization server, on one port of 127.0.0.1, for the tests.

Usage: python tests/mcp_oauth_server.py [--no-hint]

Prints the port it listens on, then serves until killed. The client id and secret it accepts
are the environment's ``MCP_CLIENT_ID`` and ``MCP_CLIENT_SECRET``.

- ``/mcp``: the ``mcp`` SDK's server; a request without a token it issued (and has not revoked)
  gets ``401`` with ``WWW-Authenticate: Bearer resource_metadata="..."`` (no hint with
  ``--no-hint``: the client must find the well-known document itself).
- ``/.well-known/oauth-protected-resource/mcp``: the protected resource metadata, naming the
  authorization server ``/auth``, whose metadata is at
  ``/.well-known/oauth-authorization-server/auth`` and whose token endpoint is ``/auth/token``
  (HTTP Basic, ``grant_type=client_credentials``).
- ``/control``: GET says what happened (token requests with their forms, tokens issued, requests
  refused); POST a JSON object changes what happens next: ``fail`` (an HTTP status the token
  endpoint answers with, or null), ``revoke`` (true: every token issued so far is refused),
  ``refuse_all`` (true: every token is refused), ``expires_in`` (the lifetime of the next tokens;
  null: none given).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import sys
from urllib.parse import parse_qsl

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

CLIENT_ID = os.environ["MCP_CLIENT_ID"]
CLIENT_SECRET = os.environ["MCP_CLIENT_SECRET"]
HINT = "--no-hint" not in sys.argv

server = MCPServer("toolloop-oauth-test", log_level="WARNING")
STATE: dict = {"fail": None, "refuse_all": False, "expires_in": 3600, "valid": set(), "issued": [],
               "token_requests": [], "refused": 0, "metadata_requests": [], "last_token": None}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> dict:
    """Say the text back."""
    return {"text": text}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> dict:
    """Say which token the caller sent (a careless server)."""
    return {"token": STATE["last_token"]}


async def _body(receive) -> bytes:
    out = b""
    while True:
        message = await receive()
        out += message.get("body", b"")
        if not message.get("more_body"):
            return out


async def _answer(send, status: int, data, headers: list | None = None) -> None:
    body = json.dumps(data).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def app_for(port: int, mcp_app):
    base = f"http://127.0.0.1:{port}"

    async def app(scope, receive, send):
        if scope["type"] != "http":
            await mcp_app(scope, receive, send)
            return
        path = scope["path"]
        headers = dict(scope.get("headers") or [])
        if path.startswith("/.well-known/"):
            STATE["metadata_requests"].append(path)
            if path == "/.well-known/oauth-protected-resource/mcp":
                await _answer(send, 200, {"resource": f"{base}/mcp", "authorization_servers": [f"{base}/auth"]})
            elif path == "/.well-known/oauth-authorization-server/auth":
                await _answer(send, 200, {"issuer": f"{base}/auth", "token_endpoint": f"{base}/auth/token",
                                          "grant_types_supported": ["client_credentials"]})
            else:
                await _answer(send, 404, {"error": "not_found"})
            return
        if path == "/auth/token":
            await token(scope, receive, send, headers)
            return
        if path == "/control":
            if scope["method"] == "POST":
                change = json.loads(await _body(receive) or b"{}")
                if change.pop("revoke", False):
                    STATE["valid"].clear()
                STATE.update(change)
            shown = {k: v for k, v in STATE.items() if k != "valid"}
            await _answer(send, 200, shown)
            return
        bearer = headers.get(b"authorization", b"").decode()
        given = bearer[7:] if bearer.startswith("Bearer ") else None
        if given is None or given not in STATE["valid"] or STATE["refuse_all"]:
            STATE["refused"] += 1
            STATE.setdefault("refused_requests", []).append(f"{scope['method']} {'with' if given else 'without'}")
            challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' if HINT \
                else 'Bearer realm="mcp"'
            await _answer(send, 401, {"error": "invalid_token"}, [(b"www-authenticate", challenge.encode())])
            return
        STATE["last_token"] = given
        await mcp_app(scope, receive, send)

    return app


async def token(scope, receive, send, headers) -> None:
    form = dict(parse_qsl((await _body(receive)).decode()))
    basic = headers.get(b"authorization", b"").decode()
    STATE["token_requests"].append({"form": form, "basic": basic.startswith("Basic ")})
    if STATE["fail"]:
        await _answer(send, STATE["fail"], {"error": "temporarily_unavailable",
                                            "error_description": f"secret was {CLIENT_SECRET}"})
        return
    expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    if basic != f"Basic {expected}" or form.get("grant_type") != "client_credentials":
        await _answer(send, 401, {"error": "invalid_client"})
        return
    issued = f"tok-{len(STATE['issued'])}-{secrets.token_hex(12)}"
    STATE["valid"].add(issued)
    STATE["issued"].append(issued)
    answer = {"access_token": issued, "token_type": "Bearer"}
    if STATE["expires_in"] is not None:
        answer["expires_in"] = STATE["expires_in"]
    await _answer(send, 200, answer)


def main() -> None:
    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # before the port is said: a client may connect at once
    port = sock.getsockname()[1]
    config = uvicorn.Config(app_for(port, server.streamable_http_app()), log_level="warning", lifespan="on")
    print(port, flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
