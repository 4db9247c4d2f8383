"""A lean HTTP/1.1 exchange for the providers: one POST on a kept-alive connection, the whole
body read at once, with h11 over anyio's streams (trio's, under the engine).

A routed run asks its model once a turn, so the request path is a large part of a turn's own
cost: httpx's async client (its request building, auth and redirect layers, the connection
pool, response streaming and closing, over anyio) cost about half a turn. This path keeps what
a provider needs of it: a connection reused across turns (a stale one is noticed before use and
replaced), TLS verified as httpx verifies it (``httpx.create_ssl_context``), responses in
Content-Length, chunked or read-to-close framing, gzip and deflate bodies, one timeout for the
whole exchange. What it does not do (a proxy from the environment, credentials in the URL) is
left to httpx: ``lean_ok`` says when a server may be asked this way.

Errors are ``WireError`` with the kind the provider maps to a ``ProviderError``; none holds a
request header (where the key is).
"""

from __future__ import annotations

import functools
import os
import select
import zlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import h11
from anyio.abc import SocketAttribute

#: environment variables that route a request through a proxy (httpx reads them): such a
#: request goes through httpx, which honours them
PROXY_ENV = ("http_proxy", "https_proxy", "all_proxy")
#: idle connections kept per server (more only if requests overlap)
MAX_IDLE = 4
READ_SIZE = 65536


class WireError(Exception):
    """A failed exchange: ``kind`` is ``timeout``, ``transport`` (with the cause chained) or
    ``decode`` (a body in a content encoding that does not decode)."""

    def __init__(self, kind: str, detail: str = ""):
        self.kind = kind
        super().__init__(detail)


@dataclass(frozen=True, slots=True)
class WireReply:
    """A response as the providers read it (the attributes they read of httpx's)."""

    status_code: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    content: bytes


def lean_ok(base_url: str, env: Any = None) -> bool:
    """Whether requests to ``base_url`` may take the lean path: http or https, no user info in
    the URL, and no proxy named by the environment."""
    env = os.environ if env is None else env
    try:
        parts = urlsplit(base_url)
        parts.port  # a port out of range: httpx says what is wrong with the URL
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        return False
    return not any(env.get(name) or env.get(name.upper()) for name in PROXY_ENV)


class Wire:
    """Kept-alive connections to one server (scheme, host and port of ``base_url``)."""

    def __init__(self, base_url: str):
        parts = urlsplit(base_url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._tls else 80)
        default = (self._port == 443) if self._tls else (self._port == 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_header = host if default else f"{host}:{self._port}"
        self._path_prefix = parts.path.rstrip("/")
        # a base URL's query (some hosted endpoints take the API version there) goes after the path
        self._query = f"?{parts.query}" if parts.query else ""
        self._idle: list[_Conn] = []

    async def post(self, path: str, headers: dict[str, str], body: bytes, timeout_s: float) -> WireReply:
        """POST ``body`` to ``path`` (under the base URL's path) and read the whole reply."""
        request = self._request(path, headers, body)
        with anyio.move_on_after(timeout_s) as scope:
            conn = await self._take()
            try:
                reply = await conn.exchange(request, body)
            except BaseException:
                # cancelled, timed out or broken part-way: the connection's state is unknown
                await conn.close()
                raise
            if conn.reusable() and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
            else:
                await conn.close()
            return reply
        assert scope.cancelled_caught
        raise WireError("timeout")

    def _request(self, path: str, headers: dict[str, str], body: bytes) -> h11.Request:
        fields = [("host", self._host_header), ("accept", "*/*"), ("accept-encoding", "gzip, deflate"),
                  ("content-length", str(len(body))), ("user-agent", "toolloop")]
        fields.extend((k, v) for k, v in headers.items())
        try:
            return h11.Request(method="POST", target=(self._path_prefix + path + self._query).encode(), headers=fields)
        except h11.LocalProtocolError:  # its message would quote the header, which may be the key
            raise WireError("transport", "the request's path or one of its headers holds characters HTTP does not"
                                         " allow") from None

    async def _take(self) -> _Conn:
        while self._idle:
            conn = self._idle.pop()
            if conn.alive():
                return conn
            await conn.close()  # the server closed it while it was idle
        return await self._open()

    async def _open(self) -> _Conn:
        try:
            stream: Any = await anyio.connect_tcp(self._host, self._port)
        except OSError as exc:
            raise WireError("transport", str(exc)) from exc
        sock = stream.extra(SocketAttribute.raw_socket)
        if self._tls:
            from anyio.streams.tls import TLSStream

            try:
                stream = await TLSStream.wrap(stream, ssl_context=_tls_context(), hostname=self._host,
                                              standard_compatible=False)
            except (anyio.BrokenResourceError, anyio.EndOfStream, OSError) as exc:
                await anyio.aclose_forcefully(stream)
                raise WireError("transport", str(exc.__cause__ or exc) or type(exc).__name__) from exc
        return _Conn(stream, sock)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


@functools.lru_cache(maxsize=1)
def _tls_context() -> Any:
    """The trust httpx would use (certifi's roots, or SSL_CERT_FILE / SSL_CERT_DIR), built once
    a process: loading the roots costs tens of milliseconds, and every run (a child run too)
    makes its own providers."""
    import httpx

    return httpx.create_ssl_context()


class _Conn:
    def __init__(self, stream: Any, sock: Any):
        self.stream = stream
        self.sock = sock
        self.h11 = h11.Connection(h11.CLIENT)

    def alive(self) -> bool:
        """An idle connection the server has not closed: nothing is readable on it (a closed
        one reads as end of file)."""
        try:
            if not hasattr(select, "poll"):  # Windows
                return not select.select([self.sock], [], [], 0)[0]
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            return not poller.poll(0)
        except (OSError, ValueError):  # closed already
            return False

    def reusable(self) -> bool:
        conn = self.h11
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            return True
        return False

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)

    async def exchange(self, request: h11.Request, body: bytes) -> WireReply:
        conn = self.h11
        try:
            await self.stream.send(conn.send(request) + conn.send(h11.Data(data=body))
                                   + conn.send(h11.EndOfMessage()))
            status, headers, chunks = 0, {}, []
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await self.stream.receive(READ_SIZE)
                    except anyio.EndOfStream:
                        data = b""
                    conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    chunks.append(event.data)
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise WireError("transport", "the server closed the connection before the reply ended")
                # an informational (1xx) response is passed over
        except (h11.ProtocolError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise WireError("transport", str(exc.__cause__ or exc) or type(exc).__name__) from exc
        content = b"".join(chunks)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            content = _decoded(content, encoding)
        return WireReply(status, headers, content)


def _decoded(content: bytes, encoding: str) -> bytes:
    for coding in reversed([c.strip() for c in encoding.split(",") if c.strip()]):
        try:
            if coding in ("gzip", "x-gzip"):
                content = zlib.decompress(content, zlib.MAX_WBITS | 16)
            elif coding == "deflate":
                try:
                    content = zlib.decompress(content)
                except zlib.error:  # raw deflate, as some servers send it
                    content = zlib.decompress(content, -zlib.MAX_WBITS)
            elif coding != "identity":
                raise WireError("decode", f"unsupported content encoding {coding!r}")
        except zlib.error as exc:
            raise WireError("decode", f"the body does not decode as {coding}: {exc}") from None
    return content
