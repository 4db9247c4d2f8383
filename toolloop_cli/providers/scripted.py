"""An in-process fake provider for tests: scripted replies, every request kept."""

from __future__ import annotations

from typing import Callable, Iterable, Union

from .base import ModelReply, ModelRequest, ProviderError

Scripted = Union[str, ModelReply, ProviderError, Callable[[ModelRequest], Union[str, ModelReply]]]


class ScriptedProvider:
    """Replies in order: a string (charged ``tokens``), a ``ModelReply``, a ``ProviderError``
    (raised), or a function of the request returning either of the first two."""

    name = "scripted"

    def __init__(self, replies: Iterable[Scripted], *, model: str = "scripted", tokens: tuple[int, int] = (10, 5)):
        self.replies = list(replies)
        self.model = model
        self.tokens = tokens
        self.requests: list[ModelRequest] = []
        self.closed = False

    def __repr__(self) -> str:
        return f"ScriptedProvider({len(self.replies)} replies left)"

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        self.requests.append(request)
        if not self.replies:
            raise ProviderError("client", "the scripted provider has no reply left")
        reply = self.replies.pop(0)
        if isinstance(reply, ProviderError):
            raise reply
        if callable(reply):
            reply = reply(request)
        if isinstance(reply, str):
            return ModelReply(reply, self.tokens[0], self.tokens[1], request.model or self.model)
        return reply

    async def aclose(self) -> None:
        self.closed = True
