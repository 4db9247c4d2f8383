"""OAuth client credentials for an MCP server over HTTP: the ``httpx2.Auth`` that the
MCP client of a server declared with ``auth: {client_credentials: ...}`` sends its requests through.

Before a request, a token that has not expired (in memory, or kept in the state folder:
``mcp_tokens.py``) is sent as ``Authorization: Bearer``; without one, when the token endpoint is
known (``token_url``, or found earlier), a token is asked for first. Otherwise the request goes
without one, and the server's ``401`` says where to look: its ``WWW-Authenticate``
``resource_metadata``, else its ``/.well-known/oauth-protected-resource``; the first
authorization server listed there; that server's metadata ``token_endpoint``. A token is asked
for with ``grant_type=client_credentials`` (``scope`` when given, and ``resource`` naming the
server), the client id and secret in HTTP Basic authentication. On a ``401`` to a request that
carried a token, one new token is asked for and the request sent once more; a second ``401``
ends it.

Discovery and token requests go on a client of their own: no header meant for the MCP server
reaches the authorization server, no redirect is followed, and a token endpoint that cannot be
reached leaves the server's session alive (the request is sent without a token, the server
refuses it, and ``failure`` says why, naming the endpoint's scheme, host and port and the HTTP
status: never the secret or what the endpoint answered). Nothing is sent to an address that is
neither HTTPS nor loopback.

Written with httpx2 rather than the SDK's ``ClientCredentialsOAuthProvider``, which replaces the
registry's scope by the one the server asks for, takes no fixed token URL, sends to a discovered
plain-HTTP address, and quotes the token endpoint's answer in its errors.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any, AsyncGenerator, Mapping
from urllib.parse import quote, urlsplit

import anyio
import httpx2

from .._secrets import scrub
from .._text import error_text
from . import mcp_tokens
from .mcp_tokens import may_send, where

#: seconds each discovery or token request may take
REQUEST_TIMEOUT_S = 30.0
_RESOURCE_METADATA = re.compile(r'resource_metadata\s*=\s*(?:"([^"]*)"|([^\s,]+))', re.IGNORECASE)
_OAUTH_ERROR = re.compile(r"[a-z_]{1,40}")


class ClientCredentials(httpx2.Auth):
    """The client-credentials grant for one MCP server (one per session)."""

    requires_response_body = False

    def __init__(self, decl: Any, environ: Mapping[str, str] | None = None):
        from .mcp import McpConfigError, server_name

        environ = os.environ if environ is None else environ
        cc = decl.auth.client_credentials
        for var, what in ((cc.client_id_env, "client_id_env"), (cc.client_secret_env, "client_secret_env")):
            if not environ.get(var):
                raise McpConfigError(f"environment variable {var} (mcp.auth.client_credentials.{what} of MCP server"
                                     f" {server_name(decl)}) is not set")
        self.server_url: str = decl.url
        self.client_id: str = environ[cc.client_id_env]
        self._secret: str = environ[cc.client_secret_env]
        self.scope: str | None = cc.scope
        self.token_url: str | None = cc.token_url
        self.resource = _canonical(decl.url)
        #: why the last request could not be authenticated (None once one was)
        self.failure: str | None = None
        self._endpoint: str | None = cc.token_url
        self._token: str | None = None
        self._expires_at: float | None = None
        self._spent: str | None = None  # a token just issued that the server refused: not asked again for it
        self._lock = anyio.Lock()

    # --- the flow httpx2 drives ------------------------------------------------------------------
    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token, failed = await self._before()
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            if response.status_code < 400:
                self.failure = None
            return
        if failed:
            return  # the token request failed: ``failure`` says how
        fresh = await self._after_refusal(response, token)
        if fresh is None:
            return
        request.headers["Authorization"] = f"Bearer {fresh}"
        response = yield request
        if response.status_code == 401:
            self.failure = f"{where(self.server_url)} answered HTTP 401 to a token just issued"
            self._spent = fresh
            if self._endpoint is not None:  # the next run asks again; this session does not
                mcp_tokens.drop_token(self._endpoint, self.client_id, fresh)
        elif response.status_code < 400:
            self.failure = None

    async def _before(self) -> tuple[str | None, bool]:
        """A token to send, asked for now if need be; and whether asking failed."""
        async with self._lock:
            if self._usable():
                return self._token, False
            endpoint = self._endpoint or mcp_tokens.cached_endpoint(self.server_url)
            if endpoint is None:
                return None, False  # the server's refusal says where to ask
            self._endpoint = endpoint
            if self._from_file(endpoint):
                return self._token, False
            token = await self._fetch(endpoint)
            return token, token is None

    async def _after_refusal(self, response: httpx2.Response, sent: str | None) -> str | None:
        """A new token after the server refused ``sent`` (or a request without one)."""
        async with self._lock:
            if self._token is not None and self._token != sent and self._usable():
                return self._token  # another request got one meanwhile
            if sent is not None and sent == self._spent:
                return None  # refused as soon as it was issued: another would be too
            if sent is not None:
                self._drop(sent)
            endpoint = self._endpoint or mcp_tokens.cached_endpoint(self.server_url)
            if endpoint is None:
                endpoint = await self._discover(response)
                if endpoint is None:
                    return None
            self._endpoint = endpoint
            if sent is None and self._from_file(endpoint):
                return self._token
            return await self._fetch(endpoint)

    # --- tokens ----------------------------------------------------------------------------------
    def _usable(self) -> bool:
        return self._token is not None and (self._expires_at is None or mcp_tokens.now() < self._expires_at)

    def _from_file(self, endpoint: str) -> bool:
        kept = mcp_tokens.cached_token(endpoint, self.client_id, self.resource, self.scope)
        if kept is None:
            return False
        self._token, self._expires_at = kept
        mcp_tokens.learn(self.server_url, self.client_id, kept[0])
        return True

    def _drop(self, token: str) -> None:
        if self._token == token:
            self._token = self._expires_at = None
        if self._endpoint is not None:
            mcp_tokens.drop_token(self._endpoint, self.client_id, token)

    async def _fetch(self, endpoint: str) -> str | None:
        """A new token from ``endpoint``; None with ``failure`` set when there is none."""
        if not may_send(endpoint):
            return self._failed(f"the token endpoint {where(endpoint)} is neither HTTPS nor loopback: the client"
                                " secret is not sent there")
        data = {"grant_type": "client_credentials", "resource": self.resource}
        if self.scope:
            data["scope"] = self.scope
        basic = base64.b64encode(f"{quote(self.client_id, safe='')}:{quote(self._secret, safe='')}".encode()).decode()
        asked_at = mcp_tokens.now()
        try:
            async with _client() as client:
                response = await client.post(endpoint, data=data, headers={
                    "Authorization": f"Basic {basic}", "Accept": "application/json"})
        except Exception as exc:  # noqa: BLE001 - said as one line
            return self._failed(f"the token endpoint {where(endpoint)} could not be reached: {self._said(exc)}")
        answer = _json(response)
        if response.status_code != 200:
            error = answer.get("error") if isinstance(answer, dict) else None
            code = f" ({error})" if isinstance(error, str) and _OAUTH_ERROR.fullmatch(error) else ""
            return self._failed(f"the token endpoint {where(endpoint)} answered HTTP {response.status_code}"
                                f"{' ' + response.reason_phrase if response.reason_phrase else ''}{code}")
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(token, str) or not token:
            return self._failed(f"the token endpoint {where(endpoint)} answered HTTP 200 without an access_token")
        mcp_tokens.learn(self.server_url, self.client_id, token)
        kind = answer.get("token_type")
        if isinstance(kind, str) and kind.lower() != "bearer":
            return self._failed(f"the token endpoint {where(endpoint)} issued a token of type {kind[:20]!r},"
                                " not Bearer")
        lifetime = answer.get("expires_in")
        expires_at = asked_at + float(lifetime) if isinstance(lifetime, (int, float)) and lifetime > 0 \
            and not isinstance(lifetime, bool) else None
        self._token, self._expires_at, self.failure = token, expires_at, None
        mcp_tokens.keep_token(endpoint, self.client_id, self.resource, self.scope, token, expires_at)
        return token

    def _failed(self, why: str) -> str | None:
        """No token: ``why`` kept as ``failure``, None for the caller to return."""
        self.failure = why
        return None

    def _said(self, exc: BaseException) -> str:
        return scrub(error_text(exc), [self._secret])

    # --- discovery -------------------------------------------------------------------------------
    async def _discover(self, refusal: httpx2.Response) -> str | None:
        """The token endpoint, as the server's refusal and metadata say; None with ``failure`` set."""
        tried: list[str] = []
        hint = _resource_metadata(refusal)
        candidates = _protected_resource_urls(self.server_url)
        if hint is not None:
            if not may_send(hint):
                return self._failed(f"the server's resource_metadata {where(hint)} is neither HTTPS nor loopback:"
                                    " not followed")
            candidates.insert(0, hint)
        async with _client() as client:
            resource = await _first_document(client, candidates, "authorization_servers", tried)
            if resource is None:
                return self._failed(f"{where(self.server_url)} published no protected resource metadata"
                                    f" ({', '.join(tried)})")
            servers = resource["authorization_servers"]
            named = resource.get("resource")
            if isinstance(named, str) and named:
                if not _covers(named, self.resource):
                    return self._failed(f"the protected resource metadata of {where(self.server_url)} is for another"
                                        " resource")
                self.resource = named
            issuer = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], str) else None
            if issuer is None:
                return self._failed(f"the protected resource metadata of {where(self.server_url)} names no"
                                    " authorization server")
            if not may_send(issuer):
                return self._failed(f"the authorization server {where(issuer)} is neither HTTPS nor loopback:"
                                    " not used")
            tried = []
            metadata = await _first_document(client, _authorization_server_urls(issuer), "token_endpoint", tried)
        if metadata is None:
            return self._failed(f"the authorization server {where(issuer)} published no metadata with a"
                                f" token_endpoint ({', '.join(tried)})")
        named_issuer = metadata.get("issuer")
        if isinstance(named_issuer, str) and named_issuer.rstrip("/") != issuer.rstrip("/"):
            return self._failed(f"the authorization server metadata at {where(issuer)} names another issuer")
        endpoint = metadata["token_endpoint"]
        if not isinstance(endpoint, str) or not may_send(endpoint):
            shown = where(endpoint) if isinstance(endpoint, str) else "?"
            return self._failed(f"the token endpoint {shown} is neither HTTPS nor loopback: the client secret is"
                                " not sent there")
        if self.token_url is None:
            mcp_tokens.remember_endpoint(self.server_url, endpoint)
        return endpoint


def _client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=REQUEST_TIMEOUT_S, follow_redirects=False)


def _json(response: httpx2.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def _canonical(url: str) -> str:
    """The server's address as the ``resource`` it is (no fragment, lower-case scheme and host)."""
    parts = urlsplit(url)
    return parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower(), fragment="").geturl()


def _covers(named: str, resource: str) -> bool:
    """Whether the resource a metadata document names is the server's address or a parent of it."""
    a, b = urlsplit(_canonical(named)), urlsplit(resource)
    if (a.scheme, a.netloc) != (b.scheme, b.netloc):
        return False
    base = a.path.rstrip("/")
    return b.path.rstrip("/") == base or b.path.startswith(base + "/")


def _resource_metadata(response: httpx2.Response) -> str | None:
    found = _RESOURCE_METADATA.search(response.headers.get("www-authenticate", ""))
    return (found.group(1) or found.group(2)) if found else None


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _protected_resource_urls(server_url: str) -> list[str]:
    path = urlsplit(server_url).path.rstrip("/")
    base = f"{_origin(server_url)}/.well-known/oauth-protected-resource"
    return [base + path, base] if path else [base]


def _authorization_server_urls(issuer: str) -> list[str]:
    """Where an authorization server's metadata may be (RFC 8414, then OpenID Connect discovery)."""
    origin, path = _origin(issuer), urlsplit(issuer).path.rstrip("/")
    if not path:
        return [f"{origin}/.well-known/oauth-authorization-server", f"{origin}/.well-known/openid-configuration"]
    return [f"{origin}/.well-known/oauth-authorization-server{path}", f"{origin}/.well-known/openid-configuration{path}",
            f"{origin}{path}/.well-known/openid-configuration"]


async def _first_document(client: httpx2.AsyncClient, urls: list[str], needs: str, tried: list[str]
                          ) -> dict[str, Any] | None:
    """The first of ``urls`` that answers a JSON object holding ``needs``."""
    for url in urls:
        try:
            response = await client.get(url, headers={"Accept": "application/json"})
        except Exception as exc:  # noqa: BLE001 - the next place is tried
            tried.append(f"{where(url)}: {type(exc).__name__}")
            continue
        data = _json(response) if response.status_code == 200 else None
        if isinstance(data, dict) and needs in data:
            return data
        tried.append(f"{where(url)}{urlsplit(url).path} answered HTTP {response.status_code}")
    return None
