"""Where OAuth client-credential tokens for MCP servers are kept, and which are known.

A token is kept in the state folder, in ``mcp-tokens.json`` (readable and writable by its owner
only, replaced whole so a reader never sees half a file), keyed by the token URL and the client
id, until its ``expires_in`` has passed (a token without one is kept until a server refuses it);
beside the tokens, the token endpoint discovered for each server address, so a later run with a
token still valid neither discovers nor asks again. The client secret is never written.

Every token this process has sent or read is known here, so that whoever writes what a server
or a run gives back can hide it (``contract.mcp.secrets``; the runs' ``RunSecrets`` that are alive
are told of each new one as it comes). This module is light: the HTTP side is ``mcp_auth.py``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from .._secrets import tell_credentials, watch_credentials
from . import use_state_folder  # noqa: F401  (where callers have always found it)

CACHE_NAME = "mcp-tokens.json"

_KNOWN: dict[tuple[str, str], set[str]] = {}  # (server url, client id) -> tokens sent or read
_LOCK = threading.Lock()


def now() -> float:
    """The wall clock a token's lifetime is counted on (it outlives the process)."""
    return time.time()


def cache_path() -> Path:
    """The token file of the state folder ``use_state_folder`` named (a command's ``--state-dir``;
    None: ``TOOLLOOP_STATE_DIR``, else ``./.toolloop``)."""
    from . import state_folder

    folder = state_folder()
    return Path(folder if folder is not None else os.environ.get("TOOLLOOP_STATE_DIR") or ".toolloop") / CACHE_NAME


# ------------------------------------------------------------------------------ the variables


def variables(decl: Any) -> tuple[str, str] | None:
    """The environment variables of a server's client id and secret, or None without ``auth``."""
    auth = getattr(decl, "auth", None)
    if auth is None:
        return None
    cc = auth.client_credentials
    return cc.client_id_env, cc.client_secret_env


def unset_variables(decl: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """The client-credential variables of ``decl`` that are unset or empty."""
    environ = os.environ if environ is None else environ
    return [var for var in (variables(decl) or ()) if not environ.get(var)]


# ------------------------------------------------------------------------------ known tokens


def _key(decl: Any, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    environ = os.environ if environ is None else environ
    names = variables(decl)
    return decl.url, (environ.get(names[0], "") if names else "")


def known(decl: Any, environ: Mapping[str, str] | None = None) -> list[str]:
    """The tokens this process has sent to, or read for, this server and client."""
    with _LOCK:
        return list(_KNOWN.get(_key(decl, environ), ()))


def learn(server_url: str, client_id: str, token: str) -> None:
    """A token sent or read: from now on hidden wherever a run or a server's answer is written."""
    with _LOCK:
        tokens = _KNOWN.setdefault((server_url, client_id), set())
        if token in tokens:
            return
        tokens.add(token)
    tell_credentials([token])


def watch(secrets: Any) -> None:
    """``secrets`` (anything with ``add(values)``, held weakly) is told of every token learnt
    from now on (a run's secrets register below every layer, ``_secrets.watch_credentials``)."""
    watch_credentials(secrets)


# ------------------------------------------------------------------------------ where to send


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def may_send(url: str) -> bool:
    """Whether credentials may go to ``url``: HTTPS, or plain HTTP on loopback."""
    parts = urlsplit(url)
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname))


def where(url: str) -> str:
    """``scheme://host:port`` of an address, as messages name it (no path, query or user)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


# ------------------------------------------------------------------------------ the token file


def _read() -> dict[str, Any]:
    path = cache_path()
    try:
        if path.stat().st_uid != os.getuid():  # a file someone else put there is not ours to trust
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(data: dict[str, Any]) -> None:
    path = cache_path()
    fresh = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    if fresh or path.parent.name == ".toolloop":
        ignore = path.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# toolloop's state (journal and cache): never committed\n*\n", encoding="utf-8")
    tmp = path.with_name(f".{CACHE_NAME}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(data, indent=1, sort_keys=True).encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _change(edit: Any) -> None:
    """Read, change and write the file back whole (a token that cannot be kept is asked again
    next time: the file is a cache)."""
    with _LOCK:
        try:
            data = _read()
            edit(data)
            _write(data)
        except OSError:
            pass


def _token_key(token_url: str, client_id: str) -> str:
    return json.dumps([token_url, client_id])


def cached_endpoint(server_url: str) -> str | None:
    """The token endpoint discovered earlier for this server address."""
    found = _read().get("endpoints", {})
    value = found.get(server_url) if isinstance(found, dict) else None
    return value if isinstance(value, str) and may_send(value) else None


def remember_endpoint(server_url: str, token_url: str) -> None:
    _change(lambda data: data.setdefault("endpoints", {}).__setitem__(server_url, token_url))


def cached_token(token_url: str, client_id: str, resource: str, scope: str | None) -> tuple[str, float | None] | None:
    """A kept token for this endpoint and client, asked for the same resource and scope, that has
    not expired: ``(token, expires_at)``."""
    tokens = _read().get("tokens", {})
    entry = tokens.get(_token_key(token_url, client_id)) if isinstance(tokens, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("access_token"), str):
        return None
    if entry.get("resource") != resource or entry.get("scope") != scope:
        return None
    expires_at = entry.get("expires_at")
    if expires_at is not None and (not isinstance(expires_at, (int, float)) or now() >= expires_at):
        return None
    return entry["access_token"], expires_at


def keep_token(token_url: str, client_id: str, resource: str, scope: str | None, token: str,
               expires_at: float | None) -> None:
    entry = {"access_token": token, "expires_at": expires_at, "resource": resource, "scope": scope}
    _change(lambda data: data.setdefault("tokens", {}).__setitem__(_token_key(token_url, client_id), entry))


def drop_token(token_url: str, client_id: str, token: str) -> None:
    """Forget a token a server refused (only if it is still the one kept)."""
    def edit(data: dict[str, Any]) -> None:
        tokens = data.get("tokens")
        key = _token_key(token_url, client_id)
        if isinstance(tokens, dict) and isinstance(tokens.get(key), dict) and tokens[key].get("access_token") == token:
            del tokens[key]

    _change(edit)


def secrets(decls: Iterable[Any], environ: Mapping[str, str] | None = None) -> list[str]:
    """The client secrets of these servers and the tokens known for them."""
    environ = os.environ if environ is None else environ
    out: list[str] = []
    for decl in decls:
        names = variables(decl)
        if names is None:
            continue
        if environ.get(names[1]):
            out.append(environ[names[1]])
        out.extend(known(decl, environ))
    return out
