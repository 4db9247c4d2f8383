"""The Anthropic Messages API (``base_url`` for a compatible server or a gateway)."""

from __future__ import annotations

from .base import ModelReply, ModelRequest, ProviderError
from ._http import HttpProvider, request_model, shown_url, tokens

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
        turns: list[dict] = []
        for m in request.messages:
            if m["role"] == "system":
                continue
            if turns and turns[-1]["role"] == m["role"]:  # the API wants user and assistant to alternate
                turns[-1]["content"] += "\n\n" + m["content"]
            else:
                turns.append({"role": m["role"], "content": m["content"]})
        body: dict = {"model": model, "max_tokens": request.max_tokens, "messages": turns}
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
            raise ProviderError("bad_reply", f"{where} replied without a content list")
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"
                 and isinstance(b.get("text"), str)]
        if not parts:
            raise ProviderError("bad_reply", f"{where} replied with no text block (stop_reason: {data.get('stop_reason')!s:.40})")
        usage = data.get("usage")
        input_tokens = tokens(usage, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        output_tokens = tokens(usage, "output_tokens")
        if input_tokens is None or output_tokens is None:
            raise ProviderError("bad_reply", f"{where} reported no token usage (usage.input_tokens, "
                                             "usage.output_tokens); budgets need it")
        reply_model = data.get("model") if isinstance(data.get("model"), str) else model
        return ModelReply("".join(parts), input_tokens, output_tokens, reply_model)
