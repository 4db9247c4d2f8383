"""HTTP plumbing shared by the openai and anthropic providers: one httpx client per provider,
one POST per request, every failure mapped to a ``ProviderError`` that never holds the key.

httpx is used directly (not a vendor SDK): a single request with no hidden retries, so the
engine's runner owns retries and the loop's deadline, and it runs under trio through anyio.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from .base import ModelRequest, Profile, ProviderError, parse_retry_after

MESSAGE_CHARS = 160
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown_url(url: str) -> str:
    """Scheme, host and port only: no user info, path or query in any message."""
    import httpx

    try:
        u = httpx.URL(url)
    except Exception:  # noqa: BLE001 - any unparsable URL is shown as such
        return "(unparsable URL)"
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{u.host}{port}"


def clean(text: str, secret: str | None) -> str:
    """A message fit to show: the secret replaced, control characters escaped, bounded."""
    if secret:
        text = text.replace(secret, "[REDACTED]")
    text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS] + "…"


class HttpProvider:
    """Base of the HTTP providers: the key from the environment at request time, one client."""

    name = "http"
    default_base_url = ""

    def __init__(self, profile: Profile, env: Mapping[str, str]):
        self._profile = profile
        self._env = env
        self._base_url = (profile.base_url or self.default_base_url).rstrip("/")
        self._client: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._profile.model!r}, base_url={shown_url(self._base_url)!r})"

    def _key(self) -> str | None:
        var = self._profile.api_key_env
        if var is None:
            return None
        key = self._env.get(var)
        if not key:
            raise ProviderError("client", f"the environment variable {var} (api_key_env) is not set or is empty")
        return key

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def _post(self, path: str, headers: dict[str, str], body: dict, timeout_s: float, secret: str | None) -> dict:
        import httpx
        import orjson

        if self._client is None:
            self._client = httpx.AsyncClient(follow_redirects=False)
        url = self._base_url + path
        where = shown_url(url)
        try:
            resp = await self._client.post(url, headers={**headers, "content-type": "application/json"},
                                           content=orjson.dumps(body), timeout=timeout_s)
        except httpx.TimeoutException:
            raise ProviderError("connection", f"no reply from {where} within {timeout_s:g} s") from None
        except httpx.TransportError as exc:
            detail = clean(str(exc), secret) or type(exc).__name__
            raise ProviderError("connection", f"cannot reach {where}: {detail}") from None
        status = resp.status_code
        if status >= 400:
            retry_after = parse_retry_after(resp.headers.get("retry-after"))
            if retry_after is None and resp.headers.get("retry-after-ms"):
                ms = parse_retry_after(resp.headers.get("retry-after-ms"))
                retry_after = None if ms is None else ms / 1000
            detail = clean(_error_text(resp), secret)
            kind = "rate_limited" if status == 429 else "server" if status >= 500 else "client"
            raise ProviderError(kind, f"{where} answered HTTP {status}{': ' + detail if detail else ''}",
                                status=status, retry_after_s=retry_after)
        try:
            data = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            raise ProviderError("bad_reply", f"{where} answered HTTP {status} with a body that is not JSON: "
                                             f"{clean(resp.text, secret)!r}", status=status) from None
        if not isinstance(data, dict):
            raise ProviderError("bad_reply", f"{where} answered with JSON that is not an object", status=status)
        return data


def _error_text(resp: Any) -> str:
    """The error message a JSON error body carries (OpenAI and Anthropic put it at
    ``error.message``), else the start of the body."""
    try:
        data = resp.json()
    except ValueError:
        return resp.text.strip()
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(data.get("message"), str):
            return data["message"]
    return resp.text.strip()


def tokens(usage: Any, *names: str) -> int | None:
    """The sum of the named integer counters of a usage object; ``None`` if the first is missing."""
    if not isinstance(usage, dict) or not isinstance(usage.get(names[0]), int):
        return None
    return sum(usage.get(n) or 0 for n in names if isinstance(usage.get(n), int))


def request_model(request: ModelRequest, profile: Profile) -> str:
    model = request.model or profile.model
    if not model:
        raise ProviderError("client", "no model named for this request")
    return model
