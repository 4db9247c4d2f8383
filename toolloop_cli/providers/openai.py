"""The Chat Completions protocol (OpenAI, and with ``base_url`` any compatible server: vLLM,
llama.cpp, Ollama, LM Studio)."""

from __future__ import annotations

from typing import Any, Mapping

from .._text import excerpt
from .base import CUT, ModelReply, ModelRequest, Profile, ProviderError, ProviderKind, check_needs_model
from ._http import HttpProvider, read_usage, request_model, shown_url


class OpenAIProvider(HttpProvider):
    name = "openai"
    default_base_url = "https://api.openai.com/v1"

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        key = self._key()
        model = request_model(request, self._profile)
        body: dict[str, Any] = {"model": model, "messages": [{"role": m["role"], "content": m["content"]} for m in request.messages],
                      "stream": False}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.json_mode:
            body["response_format"] = {"type": "json_object"}
        headers = {"authorization": f"Bearer {key}"} if key else {}
        data = await self._post("/chat/completions", headers, body, timeout_s, key)
        where = shown_url(self._base_url)
        choices = data.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        message = choice.get("message") if choice is not None else None
        if not isinstance(message, dict):
            raise ProviderError("bad_reply", f"the server {where} replied without choices[0].message")
        reason = choice.get("finish_reason")  # type: ignore[union-attr]
        cut = reason == "length"  # stopped at max_tokens: the text ends where the limit fell
        text = _text(message.get("content"))
        if text is None:
            why = CUT if cut else f"finish_reason: {excerpt(reason, 40)}"
            raise ProviderError("bad_reply", f"the server {where} replied with no text ({why})")
        input_tokens, output_tokens, reported = read_usage(data, where, ("prompt_tokens",), "completion_tokens")
        reply_model = data["model"] if isinstance(data.get("model"), str) else model
        return ModelReply(text, input_tokens, output_tokens, reply_model, usage_reported=reported, cut=cut)

def _text(content: object) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts, as some compatible servers send
        parts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def _make(profile: Profile, *, env: Mapping[str, str], **_: object) -> OpenAIProvider:
    return OpenAIProvider(profile, env)


KIND = ProviderKind(make=_make, check=check_needs_model)
