"""The Anthropic Messages API (``base_url`` for a compatible server or a gateway)."""

from __future__ import annotations

from typing import Any, Mapping

from .._text import excerpt
from .base import CUT, ModelReply, ModelRequest, Profile, ProviderError, ProviderKind, check_needs_model
from ._http import HttpProvider, read_usage, request_model, shown_url

API_VERSION = "2023-06-01"


class AnthropicProvider(HttpProvider):
    name = "anthropic"
    default_base_url = "https://api.anthropic.com"

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        key = self._key()
        model = request_model(request, self._profile)
        if request.max_tokens is None:
            raise ProviderError("client", "the Messages API needs max_tokens: set max_output_tokens on the profile")
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        turns: list[dict[str, Any]] = []
        for m in request.messages:
            if m["role"] == "system":
                continue
            if turns and turns[-1]["role"] == m["role"]:  # the API wants user and assistant to alternate
                turns[-1]["content"] += "\n\n" + m["content"]
            else:
                turns.append({"role": m["role"], "content": m["content"]})
        body: dict[str, Any] = {"model": model, "max_tokens": request.max_tokens, "messages": turns}
        if system:
            body["system"] = system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        headers = {"anthropic-version": API_VERSION}
        if key:
            headers["x-api-key"] = key
        data = await self._post("/v1/messages", headers, body, timeout_s, key)
        where = shown_url(self._base_url)
        content = data.get("content")
        if not isinstance(content, list):
            raise ProviderError("bad_reply", f"the server {where} replied without a content list")
        cut = data.get("stop_reason") == "max_tokens"  # the text ends where the limit fell
        parts = [b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        if not parts:
            why = CUT if cut else f"stop_reason: {excerpt(data.get('stop_reason'), 40)}"
            raise ProviderError("bad_reply", f"the server {where} replied with no text block ({why})")
        input_tokens, output_tokens, reported = read_usage(
            data, where, ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"), "output_tokens")
        reply_model = data["model"] if isinstance(data.get("model"), str) else model
        return ModelReply("".join(parts), input_tokens, output_tokens, reply_model, usage_reported=reported, cut=cut)


def _make(profile: Profile, *, env: Mapping[str, str], **_: object) -> AnthropicProvider:
    return AnthropicProvider(profile, env)


KIND = ProviderKind(make=_make, check=check_needs_model)
