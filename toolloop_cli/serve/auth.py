"""Who is asking, and may they change anything.

Every request carries a token: ``Authorization: Bearer TOKEN``, or the page's cookie, which
``/?token=TOKEN`` sets once (HttpOnly, SameSite=Strict; it holds a value derived from the token,
never the token itself). A request that changes something (any method but GET and HEAD) made
with the cookie must also come from the server's own origin (``Origin``, else ``Referer``) and
carry the page's CSRF token in ``X-CSRF-Token``; with the bearer header it needs nothing more
(a browser never adds that header by itself).

People: with a users file each has a token from an environment variable and is recorded by name
as the approver; without one there is one token and the approver is whoever started the server.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import parse_qs

from ..errors import UsageError

COOKIE = "toolloop_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: what a 401 page tells a person
OPEN_WITH_TOKEN = ("Open this page with its token once: /?token=TOKEN (or this page's address followed by ?token=TOKEN)."
                   " The token is the one toolloop serve printed when it started, or the value of"
                   " TOOLLOOP_SERVE_TOKEN; with a users file, the value of your own variable.")


@dataclass(frozen=True, slots=True)
class User:
    name: str
    token: str

    @property
    def session(self) -> str:
        """The cookie's value: derived from the token, so the cookie never holds the token."""
        return hmac.new(self.token.encode(), b"toolloop serve session", hashlib.sha256).hexdigest()


class Users:
    """The people who may use the server, found by token or by session cookie in constant time."""

    def __init__(self, users: list[User], csrf_key: bytes | None = None):
        self.users = users
        self._csrf_key = csrf_key or secrets.token_bytes(32)

    def by_token(self, token: str) -> User | None:
        found = None
        for user in self.users:
            if hmac.compare_digest(user.token.encode(), token.encode()):
                found = user
        return found

    def by_session(self, value: str) -> User | None:
        found = None
        for user in self.users:
            if hmac.compare_digest(user.session.encode(), value.encode()):
                found = user
        return found

    def csrf(self, user: User) -> str:
        """The CSRF token the page of ``user`` sends back with each change."""
        return hmac.new(self._csrf_key, user.session.encode(), hashlib.sha256).hexdigest()


def single_user(environ: Mapping[str, str], name: str) -> tuple[Users, str, bool]:
    """One token for everyone: ``TOOLLOOP_SERVE_TOKEN``, or a new one. ``(users, token, generated)``."""
    token = environ.get("TOOLLOOP_SERVE_TOKEN", "")
    generated = not token
    if generated:
        token = secrets.token_urlsafe(24)
    _check_token(token, "TOOLLOOP_SERVE_TOKEN")
    return Users([User(name, token)]), token, generated


def _check_token(token: str, where: str) -> None:
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
        raise UsageError(f"{where} holds a space or a control character; a token is one word (e.g. from"
                         " 'python -c \"import secrets; print(secrets.token_urlsafe(24))\"')")


def load_users(path: str, environ: Mapping[str, str]) -> Users:
    """The users file: YAML ``name: {token_env: VAR}``. Every variable must be set (UsageError,
    naming the file, line and what to do, otherwise)."""
    from .._text import escape

    where = escape(path)
    data, smap = _read_users(path, where)

    def at(keys: tuple, key: bool = False) -> str:
        line, col = smap.position(keys, at_key=key)
        return f"{where}:{line}:{col}"

    users: list[User] = []
    for name, entry in data.items():
        token = _user_token(name, entry, environ, at, where)
        if any(hmac.compare_digest(u.token.encode(), token.encode()) for u in users):
            from .._text import quoted

            raise UsageError(f"{at((name, 'token_env'))}: user {quoted(name)} has the same token as another user;"
                             " give each person a token of their own")
        users.append(User(name, token))
    return Users(users)


_SHAPE = "write one entry per person: 'NAME: {token_env: VARIABLE}'"


def _read_users(path: str, where: str) -> tuple[dict, Any]:
    """The users file's mapping and its source map (UsageError when it cannot be read as one)."""
    from .._text import escape
    from ..contract.source import YamlRejected, load_yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read --users {escape(path)}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{escape(path)}: the users file is not UTF-8 text") from None
    try:
        data, smap, issues = load_yaml(text, path)
    except YamlRejected as exc:
        i = exc.issue
        raise UsageError(f"{where}:{i.line}:{i.col}: {i.message}" + (f" ({i.hint})" if i.hint else "")) from None
    if issues:
        i = issues[0]
        raise UsageError(f"{where}:{i.line}:{i.col}: {i.message}" + (f" ({i.hint})" if i.hint else ""))
    if not isinstance(data, dict) or not data:
        raise UsageError(f"{where}:1:1: the users file must map names to {{token_env: VARIABLE}}; {_SHAPE}")
    return data, smap


def _user_token(name: Any, entry: Any, environ: Mapping[str, str], at: Any, where: str) -> str:
    """One user's entry checked, and the token its variable holds."""
    from .._text import escape, quoted

    if not isinstance(name, str) or not name.strip() or len(name) > 64 or escape(name) != name:
        raise UsageError(f"{at((name,), True)}: user name {quoted(name)} must be text of 1 to 64 characters"
                         " without control characters")
    if not isinstance(entry, dict) or set(entry) != {"token_env"} or not isinstance(entry["token_env"], str):
        extra = sorted(str(k) for k in entry) if isinstance(entry, dict) else []
        unknown = [k for k in extra if k != "token_env"]
        detail = f" (unknown key {quoted(unknown[0])})" if unknown else ""
        raise UsageError(f"{at((name,))}: user {quoted(name)} must be {{token_env: VARIABLE}}{detail}; {_SHAPE}")
    var = entry["token_env"]
    token = environ.get(var, "")
    if not token:
        raise UsageError(f"{at((name, 'token_env'))}: user {quoted(name)}: the variable {quoted(var)} is not set;"
                         f" export it with the person's token, or remove the user from {where}")
    _check_token(token, f"the variable {quoted(var)} of user {quoted(name)}")
    return token


def _header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return value.decode("latin-1")
    return None


def _cookie(scope: Mapping[str, Any]) -> str | None:
    raw = _header(scope, b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # noqa: BLE001 - a malformed Cookie header is no cookie
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


def _same_origin(scope: Mapping[str, Any]) -> bool:
    host = _header(scope, b"host")
    if not host:
        return False
    own = f"{scope.get('scheme', 'http')}://{host}"
    origin = _header(scope, b"origin")
    if origin is not None:
        return origin == own
    referer = _header(scope, b"referer")
    return referer is not None and (referer == own or referer.startswith(own + "/"))


class Guard:
    """ASGI middleware: a request without a valid token gets 401, a cookie-authenticated change
    without the same origin and the CSRF token gets 403; others go on with ``scope["state"]``
    holding ``user`` and ``csrf``."""

    def __init__(self, app: Any, users: Users):
        self.app = app
        self.users = users

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        api = path.startswith("/api/")
        if path.startswith("/static/") and scope["method"] in ("GET", "HEAD"):
            # the stylesheet and the script hold no data; the 401 page needs its stylesheet too
            await self.app(scope, receive, send)
            return
        bearer = _header(scope, b"authorization")
        user = None
        by_cookie = False
        if bearer is not None:
            scheme, _, token = bearer.partition(" ")
            user = self.users.by_token(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
            if user is None:
                await _refuse(send, 401, "the bearer token is not valid", api)
                return
        else:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if not api and "token" in query and scope["method"] == "GET":
                await self._open(send, query["token"][0], path)
                return
            session = _cookie(scope)
            user = self.users.by_session(session) if session else None
            by_cookie = True
            if user is None:
                await _refuse(send, 401, "a token is needed", api)
                return
        if by_cookie and scope["method"] not in SAFE_METHODS:
            sent = _header(scope, CSRF_HEADER.encode())
            if not _same_origin(scope):
                await _refuse(send, 403, "a change made with the page's cookie must come from the page itself"
                                         " (Origin does not match this server)", api)
                return
            if sent is None or not hmac.compare_digest(sent.encode(), self.users.csrf(user).encode()):
                await _refuse(send, 403, "a change made with the page's cookie needs the page's CSRF token in"
                                         " X-CSRF-Token (reload the page), or use Authorization: Bearer TOKEN", api)
                return
        state = scope.setdefault("state", {})
        state["user"] = user
        state["csrf"] = self.users.csrf(user)
        await self.app(scope, receive, send)

    async def _open(self, send: Any, token: str, path: str) -> None:
        """``PAGE?token=TOKEN`` (``/``, ``/inbox``, a run's page): the cookie is set and the same page
        opens without the token in its address."""
        from urllib.parse import quote

        user = self.users.by_token(token)
        if user is None:
            await _refuse(send, 401, "the token in the address is not valid", False)
            return
        cookie = f"{COOKIE}={user.session}; HttpOnly; SameSite=Strict; Path=/"
        # one leading slash: '//host' would send the browser to another site
        location = "/" + quote(path.lstrip("/"), safe="/")
        await send({"type": "http.response.start", "status": 303, "headers": [
            (b"location", location.encode()), (b"set-cookie", cookie.encode()), (b"cache-control", b"no-store"),
            (b"referrer-policy", b"no-referrer"), (b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})


async def _refuse(send: Any, status: int, why: str, api: bool) -> None:
    from .._json import dumps

    headers = [(b"cache-control", b"no-store")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="toolloop"'))
    if api:
        body = dumps({"error": why, "how": OPEN_WITH_TOKEN if status == 401 else None})
        headers.append((b"content-type", b"application/json"))
    else:
        from .pages import refusal_page

        body = refusal_page(status, why).encode()
        headers += [(b"content-type", b"text/html; charset=utf-8"), *[(k.encode(), v.encode()) for k, v in
                                                                      SECURITY_HEADERS.items()]]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


#: sent with every page: scripts, styles and connections from this server only; never framed
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
                               " connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}
