"""The providers' own HTTP path (providers/_wire.py) against a raw HTTP server on 127.0.0.1 that
counts its connections: a connection kept across requests, replaced when the server closed it,
dropped when a request was cancelled or broke part-way; chunked and compressed bodies; the
timeout; and the cases left to httpx (a proxy in the environment, credentials in the URL)."""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import json
import ssl

import pytest
import trio

from toolloop_cli.providers import ModelRequest, Profile, ProviderError, make_provider
from toolloop_cli.providers import _wire
from toolloop_cli.providers._wire import lean_ok

KEY = "sk-wire-NEVER-SHOWN-77"


def _reply_body(text: str) -> bytes:
    return json.dumps({"model": "m", "choices": [{"finish_reason": "stop", "message": {"content": text}}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode()


class RawServer:
    """Answers each request with ``script``'s next entry: a function of (request number, the
    request's body) that returns the raw response bytes, or None to hold the reply until
    ``release`` is set. ``close_after`` request numbers get their socket closed after the reply."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection, head, body)
        self.script: list = []
        self.close_after: set[int] = set()
        self.closed = trio.Event()
        self.release = trio.Event()
        self.port = 0

    def ok(self, text: str, extra: bytes = b"") -> bytes:
        body = _reply_body(text)
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
            len(body), extra, body)

    async def serve(self, nursery: trio.Nursery, tls: ssl.SSLContext | None = None) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        if tls is not None:
            listeners = [trio.SSLListener(listener, tls, https_compatible=True) for listener in listeners]
        nursery.start_soon(trio.serve_listeners, self._handle, listeners)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        conn = self.connections
        buf = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        data = await stream.receive_some(65536)
                    except trio.BrokenResourceError:  # a client that refused our certificate
                        return
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int([line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")][0])
                while len(buf) < length:
                    buf += await stream.receive_some(65536)
                body, buf = buf[:length], buf[length:]
                self.requests.append((conn, head, body))
                n = len(self.requests)
                answer = self.script.pop(0)(n, body)
                if answer is None:
                    await self.release.wait()
                    answer = self.ok("late")
                try:
                    await stream.send_all(answer)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if n in self.close_after:
                    await stream.aclose()
                    self.closed.set()
                    return


def provider(server: RawServer, scheme: str = "http"):
    return make_provider(Profile("openai", "m", base_url=f"{scheme}://127.0.0.1:{server.port}/v1", api_key_env="K"),
                         env={"K": KEY})


def request() -> ModelRequest:
    return ModelRequest(messages=[{"role": "user", "content": "go"}], model="m", json_mode=True)


def run(test, tls: ssl.SSLContext | None = None) -> RawServer:
    server = RawServer()

    async def main():
        async with trio.open_nursery() as nursery:
            await server.serve(nursery, tls)
            p = provider(server, "https" if tls is not None else "http")
            try:
                await test(server, p)
            finally:
                await p.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
    return server


def test_requests_share_one_kept_alive_connection():
    got = []

    async def test(server, p):
        server.script = [lambda n, body: server.ok(f"reply {n}") for _ in range(3)]
        for _ in range(3):
            got.append((await p.complete(request(), 10)).text)

    server = run(test)
    assert got == ["reply 1", "reply 2", "reply 3"]
    assert server.connections == 1
    head = server.requests[0][1].decode().lower()
    assert "post /v1/chat/completions http/1.1" in head and f"host: 127.0.0.1:{server.port}" in head
    assert f"authorization: bearer {KEY.lower()}" in head
    assert json.loads(server.requests[0][2])["messages"] == [{"role": "user", "content": "go"}]


def test_a_connection_the_server_closed_while_idle_is_replaced():
    got = []

    async def test(server, p):
        server.script = [lambda n, body: server.ok(f"reply {n}")] * 2
        server.close_after = {1}
        got.append((await p.complete(request(), 10)).text)
        await server.closed.wait()
        (idle,) = p._wire._idle
        await trio.lowlevel.wait_readable(idle.sock)  # the server's close has reached the client's socket
        got.append((await p.complete(request(), 10)).text)

    server = run(test)
    assert got == ["reply 1", "reply 2"]
    assert server.connections == 2


def test_connection_close_in_the_reply_is_honoured():
    async def test(server, p):
        server.script = [lambda n, body: server.ok("a", b"connection: close\r\n"),
                         lambda n, body: server.ok("b")]
        assert (await p.complete(request(), 10)).text == "a"
        assert (await p.complete(request(), 10)).text == "b"

    assert run(test).connections == 2


def test_a_cancelled_request_drops_its_connection_so_its_late_reply_is_never_read():
    got = []
    arrived = trio.Event()

    async def test(server, p):
        server.script = [lambda n, body: arrived.set(), lambda n, body: server.ok("second")]
        async with trio.open_nursery() as nursery:
            async def ask():
                await p.complete(request(), 10)
                got.append("the first request was answered")

            nursery.start_soon(ask)
            await arrived.wait()  # the request is on the wire, waiting for its reply
            nursery.cancel_scope.cancel()
        server.release.set()  # the held reply is sent now, to a connection the client dropped
        got.append((await p.complete(request(), 10)).text)

    server = run(test)
    assert got == ["second"]
    assert server.connections == 2


def test_no_reply_within_the_timeout_is_a_connection_error_and_the_connection_is_dropped():
    errors = []

    async def test(server, p):
        server.script = [lambda n, body: None, lambda n, body: server.ok("next")]
        with pytest.raises(ProviderError) as exc:
            await p.complete(request(), 0.2)
        errors.append(exc.value)
        server.release.set()
        assert (await p.complete(request(), 10)).text == "next"

    server = run(test)
    (err,) = errors
    assert (err.kind, err.retryable) == ("connection", True)
    assert err.message == f"the server http://127.0.0.1:{server.port} sent no reply within 0.2 s"
    assert server.connections == 2


def test_a_chunked_gzip_reply_is_read_whole():
    async def test(server, p):
        packed = gzip.compress(_reply_body("unpacked"))
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(packed[i:i + 7]), packed[i:i + 7]) for i in range(0, len(packed), 7))
        server.script = [lambda n, body: b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                         b"content-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n"
                                         + chunks + b"0\r\n\r\n",
                         lambda n, body: server.ok("after")]
        assert (await p.complete(request(), 10)).text == "unpacked"
        assert (await p.complete(request(), 10)).text == "after"

    assert run(test).connections == 1


@pytest.mark.parametrize("raw, kind, words", [
    (b"HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{\"trunc", "connection", "cannot reach the server"),
    (b"HTTP/1.1 200 OK\r\ncontent-encoding: br-ish\r\ncontent-length: 2\r\n\r\n{}", "bad_reply",
     "sent a reply that cannot be read: unsupported content encoding 'br-ish'"),
    (b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 2\r\n\r\n{}", "bad_reply",
     "sent a reply that cannot be read: the body does not decode as gzip"),
    (b"NOT HTTP\r\n\r\n", "connection", "cannot reach the server"),
])
def test_a_reply_broken_part_way_is_a_provider_error(raw, kind, words):
    errors = []

    async def test(server, p):
        server.script = [lambda n, body: raw, lambda n, body: server.ok("fine")]
        server.close_after = {1}
        with pytest.raises(ProviderError) as exc:
            await p.complete(request(), 10)
        errors.append(exc.value)
        assert (await p.complete(request(), 10)).text == "fine"  # on a new connection

    server = run(test)
    (err,) = errors
    assert err.kind == kind and words in err.message and KEY not in err.message
    assert server.connections == 2


def test_a_key_http_cannot_carry_is_refused_without_quoting_it():
    async def test(server, p):
        bad = make_provider(Profile("openai", "m", base_url=f"http://127.0.0.1:{server.port}/v1", api_key_env="K"),
                            env={"K": "sk-line\nbreak"})
        with pytest.raises(ProviderError) as exc:
            await bad.complete(request(), 10)
        assert "sk-line" not in str(exc.value) and exc.value.kind == "connection"

    assert run(test).requests == []


@pytest.mark.parametrize("url, env, lean", [
    ("http://127.0.0.1:8000/v1", {}, True),
    ("https://api.openai.com/v1", {}, True),
    ("https://api.openai.com/v1", {"HTTPS_PROXY": "http://proxy:3128"}, False),
    ("http://127.0.0.1:8000/v1", {"all_proxy": "socks5://p:1080"}, False),
    ("http://127.0.0.1:8000/v1", {"HTTP_PROXY": ""}, True),
    ("http://user:pw@127.0.0.1:8000/v1", {}, False),
    ("ftp://127.0.0.1/v1", {}, False),
    ("http://127.0.0.1:99999/v1", {}, False),
])
def test_what_is_left_to_httpx(url, env, lean):
    assert lean_ok(url, env) is lean


def _self_signed(tmp_path) -> tuple[ssl.SSLContext, str]:
    """A server context for 127.0.0.1 with a self-signed certificate, and the certificate's path."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx, str(cert_file)


def test_https_verifies_the_server_as_httpx_does_and_keeps_the_connection(tmp_path, monkeypatch):
    server_ctx, cert = _self_signed(tmp_path)
    errors, got = [], []

    async def untrusted(server, p):
        server.script = []
        with pytest.raises(ProviderError) as exc:
            await p.complete(request(), 10)
        errors.append(exc.value)

    _wire._tls_context.cache_clear()
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    assert run(untrusted, server_ctx).requests == []  # nothing is sent to a server not trusted
    (err,) = errors
    assert err.kind == "connection" and "CERTIFICATE_VERIFY_FAILED" in err.message

    async def trusted(server, p):
        server.script = [lambda n, body: server.ok(f"secure {n}")] * 2
        for _ in range(2):
            got.append((await p.complete(request(), 10)).text)

    _wire._tls_context.cache_clear()
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # the roots httpx trusts from the environment
    try:
        server = run(trusted, server_ctx)
    finally:
        _wire._tls_context.cache_clear()
    assert got == ["secure 1", "secure 2"] and server.connections == 1


@pytest.mark.parametrize("userinfo", ["", "user:pw@"])  # the kept-alive path, and httpx's
def test_a_base_urls_query_goes_after_the_path(userinfo):
    got = []

    async def test(server, _p):
        url = f"http://{userinfo}127.0.0.1:{server.port}/openai/deployments/d/?api-version=2024-06-01"
        p = make_provider(Profile("openai", "m", base_url=url, api_key_env="K"), env={"K": KEY})
        server.script = [lambda n, body: server.ok("fine")]
        try:
            got.append((await p.complete(request(), 10)).text)
        finally:
            await p.aclose()

    server = run(test)
    assert got == ["fine"]
    line = server.requests[0][1].decode().split("\r\n")[0]
    assert line == "POST /openai/deployments/d/chat/completions?api-version=2024-06-01 HTTP/1.1"
