"""Who may reach the HTTP server: a bearer token on every request (``401`` without it), and
``Host`` and ``Origin`` checked against DNS rebinding (``403`` for a foreign one).

On loopback, ``Host`` must be a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``, any
port) and ``Origin``, when sent, a loopback origin; with ``--host`` naming another address,
``Host`` must name that host and ``Origin``, when sent, must be the server's own origin. A web page
on another site that a browser was tricked into sending to this server is refused either way.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from typing import Any, Mapping
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
TOKEN_ENV = "TOOLLOOP_MCP_TOKEN"


def is_loopback_host(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_token(environ: Mapping[str, str]) -> tuple[str, bool]:
    """The token every request must carry: ``TOOLLOOP_MCP_TOKEN``, else a new one; and whether it
    was generated (then printed once at start; one a person chose is never printed)."""
    chosen = environ.get(TOKEN_ENV)
    if chosen:
        return chosen, False
    return secrets.token_urlsafe(32), True


def _split_host(value: str) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` too) as (host, port), lower-cased; ("", None) when unreadable."""
    try:
        parts = urlsplit("//" + value)
        return (parts.hostname or "").lower(), parts.port
    except ValueError:
        return "", None


class Guard:
    """The checks before the MCP app: ``host`` is what the server was told to bind (``--host``),
    ``port`` the port it listens on, ``token`` None with ``--no-token`` (loopback only)."""

    def __init__(self, host: str, port: int, token: str | None):
        self.host = host.strip("[]").lower()
        self.port = port
        self.token = token
        self.loopback = is_loopback_host(self.host)

    def host_ok(self, value: str | None) -> bool:
        if not value:
            return False
        name, _port = _split_host(value)
        if self.loopback:
            return name in LOOPBACK_NAMES or is_loopback_host(name)
        return name == self.host

    def origin_ok(self, value: str | None) -> bool:
        if value is None:
            return True  # not a browser's cross-site request
        try:
            parts = urlsplit(value)
            name, port = (parts.hostname or "").lower(), parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https"):
            return False
        if self.loopback:
            return name in LOOPBACK_NAMES or is_loopback_host(name)
        return parts.scheme == "http" and name == self.host and (port or 80) == self.port

    def token_ok(self, value: str | None) -> bool:
        if self.token is None:
            return True
        if not value or not value.startswith("Bearer "):
            return False
        return hmac.compare_digest(value[len("Bearer "):].strip().encode(), self.token.encode())

    def refusal(self, headers: Mapping[str, str]) -> tuple[int, str] | None:
        """(status, text) for a request to refuse, or None to let it through."""
        if not self.host_ok(headers.get("host")):
            return 403, "forbidden: the Host header names another host (DNS rebinding protection)"
        if not self.origin_ok(headers.get("origin")):
            return 403, "forbidden: the request comes from another origin (DNS rebinding protection)"
        if not self.token_ok(headers.get("authorization")):
            return 401, "unauthorized: send Authorization: Bearer TOKEN (the token the server printed, or TOOLLOOP_MCP_TOKEN)"
        return None

    def wrap(self, app: Any) -> Any:
        """``app`` behind the checks (an ASGI app)."""

        async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()}
                refused = self.refusal(headers)
                if refused is not None:
                    status, text = refused
                    extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
                    await send({"type": "http.response.start", "status": status,
                                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *extra]})
                    await send({"type": "http.response.body", "body": text.encode()})
                    return
            await app(scope, receive, send)

        return guarded
