"""HTTP plumbing shared by the openai and anthropic providers: one POST per request, every
failure mapped to a ``ProviderError`` that never holds the key.

No vendor SDK: a single request with no hidden retries, so the engine's runner owns retries and
the loop's deadline. A request goes over the provider's own kept-alive connection (``_wire.py``,
h11 on trio), or through httpx's client when the environment names a proxy or the URL holds
credentials (httpx honours both).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping

from .._text import escape, excerpt
from .base import ModelRequest, Profile, ProviderError, parse_retry_after

if TYPE_CHECKING:  # imported when a request is made, not when the CLI starts
    import httpx

    from ._wire import Wire, WireReply

MESSAGE_CHARS = 160


@functools.lru_cache(maxsize=64)  # asked for every request's messages; parsing is a tenth of a turn
def shown_url(url: str) -> str:
    """Scheme, host and port only: no user info, path or query in any message."""
    import httpx

    try:
        u = httpx.URL(url)
    except Exception:  # noqa: BLE001 - any unparsable URL is shown as such
        return "(unparsable URL)"
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{u.host}{port}"


def with_path(base_url: str, path: str) -> str:
    """``path`` under ``base_url``, before the base URL's query if it has one."""
    head, mark, query = base_url.partition("?")
    return head.rstrip("/") + path + mark + query


def clean(text: str, secret: str | None) -> str:
    """A message fit to show: the secret replaced, control characters escaped, bounded."""
    if secret:
        text = text.replace(secret, "[REDACTED]")
    text = text[:4 * MESSAGE_CHARS]
    text = escape(text)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


class HttpProvider:
    """Base of the HTTP providers: the key from the environment at request time, one client."""

    name = "http"
    default_base_url = ""

    def __init__(self, profile: Profile, env: Mapping[str, str]):
        self._profile = profile
        self._env = env
        self._base_url = (profile.base_url or self.default_base_url).rstrip("/")
        self._client: Any = None  # httpx's, made on first use when the lean path is not taken
        self._wire: Wire | None = None  # the lean path's connections (``_wire.py``), made on first use
        self._lean: bool | None = None  # whether requests take the lean path, known at the first

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._profile.model!r}, base_url={shown_url(self._base_url)!r})"

    @property
    def server(self) -> str:
        """The server as messages name it: scheme, host and port."""
        return shown_url(self._base_url)

    def _key(self) -> str | None:
        var = self._profile.api_key_env
        if var is None:
            return None
        key = self._env.get(var)
        if not key:
            raise ProviderError("client", f"the environment variable {var} (api_key_env) is not set or is empty,"
                                          f" so the server {shown_url(self._base_url)} was not asked")
        return key

    async def aclose(self) -> None:
        if self._wire is not None:
            wire, self._wire = self._wire, None
            await wire.aclose()
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def _post(self, path: str, headers: dict[str, str], body: dict[str, Any], timeout_s: float, secret: str | None) -> dict[str, Any]:
        import orjson

        url = with_path(self._base_url, path)
        where = shown_url(url)
        headers = {**headers, "content-type": "application/json"}
        if self._lean is None:
            from ._wire import lean_ok

            self._lean = lean_ok(self._base_url)  # the process's environment, as httpx reads it
        if self._lean:
            resp: Any = await self._post_lean(path, headers, orjson.dumps(body), timeout_s, secret, where)
        else:
            resp = await self._post_httpx(url, headers, orjson.dumps(body), timeout_s, secret, where)
        status = resp.status_code
        if status >= 400:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            if retry_after is None and resp.headers.get("retry-after-ms"):
                ms = parse_retry_after(resp.headers.get("retry-after-ms"))
                retry_after = None if ms is None else ms / 1000
            detail = clean(_error_text(resp), secret)
            kind = "rate_limited" if status == 429 else "server" if status >= 500 else "client"
            raise ProviderError(kind, f"the server {where} answered HTTP {status}{': ' + detail if detail else ''}",
                                status=status, retry_after_s=retry_after)
        data = _body_json(resp)
        if data is None:
            raise ProviderError("bad_reply", f"the server {where} answered HTTP {status} with a body that is not JSON: "
                                             f"{clean(_body_text(resp), secret)!r}", status=status)
        if not isinstance(data, dict):
            raise ProviderError("bad_reply", f"the server {where} answered with JSON that is not an object",
                                status=status)
        return data

    async def _post_lean(self, path: str, headers: dict[str, str], content: bytes, timeout_s: float,
                         secret: str | None, where: str) -> WireReply:
        """The usual path: a kept-alive connection of this provider's own (``_wire.py``)."""
        from ._wire import Wire, WireError

        if self._wire is None:
            self._wire = Wire(self._base_url)
        try:
            return await self._wire.post(path, headers, content, timeout_s)
        except WireError as exc:
            if exc.kind == "timeout":
                raise ProviderError("connection", f"the server {where} sent no reply within {timeout_s:g} s") from None
            detail = clean(str(exc), secret) or type(exc).__name__
            if exc.kind == "decode":
                raise ProviderError("bad_reply", f"the server {where} sent a reply that cannot be read: {detail}") from None
            if _refused(exc):
                raise ProviderError("connection", f"the server {where} refused the connection") from None
            raise ProviderError("connection", f"cannot reach the server {where}: {detail}") from None

    async def _post_httpx(self, url: str, headers: dict[str, str], content: bytes, timeout_s: float,
                          secret: str | None, where: str) -> Any:
        """Through httpx's client: for a server behind a proxy the environment names, or with
        credentials in its URL, which httpx honours."""
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        try:
            return await self._client.post(url, headers=headers, content=content, timeout=timeout_s)
        except httpx.TimeoutException:
            raise ProviderError("connection", f"the server {where} sent no reply within {timeout_s:g} s") from None
        except httpx.TransportError as exc:
            if _refused(exc):
                raise ProviderError("connection", f"the server {where} refused the connection") from None
            detail = clean(str(exc), secret) or type(exc).__name__
            raise ProviderError("connection", f"cannot reach the server {where}: {detail}") from None
        except httpx.HTTPError as exc:  # a reply httpx cannot read (a bad content encoding, ...)
            detail = clean(str(exc), secret) or type(exc).__name__
            raise ProviderError("bad_reply", f"the server {where} sent a reply that cannot be read: {detail}") from None


def _refused(exc: BaseException) -> bool:
    """Whether a connection failure comes from a refused connection (nothing listens on the
    port), looking through the causes and exception groups httpx and trio wrap it in."""
    import errno

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen or len(seen) > 64:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and e.errno == errno.ECONNREFUSED):
            return True
        if isinstance(e, BaseExceptionGroup):
            todo.extend(e.exceptions)
        for nxt in (e.__cause__, e.__context__):
            if nxt is not None:
                todo.append(nxt)
    return False


def _body_json(resp: httpx.Response) -> Any:
    """The reply body as JSON, or ``None``. JSON is UTF-8; a body in another charset is read
    only when its declared charset really decodes it. Nesting past orjson's limit is not JSON
    here (a model reply has no use for it), and nothing raises."""
    import orjson

    raw = resp.content
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    charset = _charset(resp)
    if charset is None or charset.replace("-", "").replace("_", "") in ("utf8", "ascii", "usascii"):
        return None
    try:
        return orjson.loads(raw.decode(charset))
    except (LookupError, ValueError):  # an unknown charset, bytes it does not decode, or not JSON
        return None


def _charset(resp: httpx.Response) -> str | None:
    ctype = resp.headers.get("content-type") or ""
    for part in ctype.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset":
            return value.strip().strip('"').lower() or None
    return None


def _body_text(resp: httpx.Response) -> str:
    """The start of the body for a message: its declared charset when that decodes it, else
    UTF-8 with what does not decode replaced; never raises."""
    raw = resp.content[:4 * MESSAGE_CHARS]
    charset = _charset(resp)
    if charset is not None:
        try:
            return raw.decode(charset).strip()
        except (LookupError, ValueError):
            pass
    return raw.decode("utf-8", errors="replace").strip()


def _error_text(resp: httpx.Response) -> str:
    """The error message a JSON error body carries (OpenAI and Anthropic put it at
    ``error.message``), else the start of the body."""
    data = _body_json(resp)
    if isinstance(data, dict):
        err = data.get("error")
        message = err.get("message") if isinstance(err, dict) else err
        if isinstance(message, str):
            return message
        message = data.get("message")
        if isinstance(message, str):
            return message
    return _body_text(resp)


def read_usage(data: dict[str, Any], where: str, inputs: tuple[str, ...], output: str) -> tuple[int, int, bool]:
    """``(input tokens, output tokens, reported)`` from a reply's ``usage``: the first of
    ``inputs`` and ``output`` are the counters every reply should carry, the other ``inputs``
    (cached prompt tokens) are added when present. A reply without them counts 0 and says it
    reported nothing (``reported`` False); a counter that is there but is not a non-negative
    integer (negative, fractional, text, true/false) refuses the reply: it would be taken as a
    credit against the budgets."""
    usage = data.get("usage")
    if usage is None:
        return 0, 0, False
    if not isinstance(usage, dict):
        raise ProviderError("bad_reply", f"the server {where} sent 'usage' as {excerpt(usage, 40)}, not an object of"
                                         " token counts; the reply is refused")
    counts: dict[str, int | None] = {}
    for name in (*inputs, output):
        value = usage.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ProviderError("bad_reply", f"the server {where} reported usage.{name} = {excerpt(value, 40)}, which"
                                             " is not a count of tokens (a non-negative integer); the reply is refused")
        counts[name] = value
    reported = counts[inputs[0]] is not None and counts[output] is not None
    return sum(counts[n] or 0 for n in inputs), counts[output] or 0, reported


def request_model(request: ModelRequest, profile: Profile) -> str:
    model = request.model or profile.model
    if not model:
        raise ProviderError("client", "no model named for this request")
    return model
