"""Every model request of a routed run: bounded by the loop's deadline, retried with backoff when
the provider says it may be (connection errors, 429, 5xx, honouring ``Retry-After``), journaled as
``model_answer`` records, and answered from the journal first when a run is resumed (a recorded
answer is reused when it was asked in the same place, by the same role: resume has already
checked that the plan and the contract are the ones the run used; a request's wording still
differs in what it says of the time left).

Providers make one request each and keep no deadline of their own; this module owns both.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import trio

from ..providers.base import ModelReply, ModelRequest, Profile, ProviderError

#: a request is tried at most this many times
MAX_TRIES = 5
BACKOFF_S = 0.25
MAX_BACKOFF_S = 8.0


class LoopTimeout(Exception):
    """The loop's deadline passed while a request was waiting (or would wait) for its answer."""


class ProviderFailed(Exception):
    """A request got no usable answer after its retries; the message says why (never the key)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A model's reply to one request, with what it cost and how it was had."""

    n: int
    role: str
    reply: ModelReply
    duration_ms: float
    recorded: bool  # taken from the journal (a resumed run), not asked again


class ModelCalls:
    """The model requests of one run, numbered ``n`` = 1, 2, … in the order they are made.

    ``journal`` commits each answer (a ``model_answer`` record) before the loop uses it.
    ``recorded`` are the answers a resumed run already has, in order: each is reused while the run
    asks the same requests in the same order, and the first mismatch ends their reuse.
    """

    def __init__(self, providers: Mapping[str, Any], *, run_id: str, journal: Callable[[dict], None],
                 recorded: Sequence[dict] = (), rng: Any = None,
                 on_answer: Callable[..., None] | None = None):
        import random

        # telemetry: (model_answer record, requested model, start in ns, provider=..., error=...);
        # a request that got no answer is reported too, with a record of its n, role and duration
        self.on_answer = on_answer
        self.providers = providers
        self.run_id = run_id
        self.journal = journal
        self._recorded = list(recorded)
        self._next = 0
        self.rng = rng or random.Random()
        self.count = 0  # requests made (a retried request counts once)

    async def ask(self, role: str, profile: Profile, messages: list[dict], *, deadline: float,
                  max_tokens: int | None) -> Answer:
        request = ModelRequest(messages=messages, model=profile.model, temperature=profile.temperature,
                               max_tokens=max_tokens, json_mode=True, role=role)
        sha = request.sha256()
        self._next += 1
        n = self._next  # 1-based, as in a fixture
        self.count += 1
        reused = self._reuse(n, role)
        if reused is not None:
            return reused
        t0, started_ns = time.perf_counter(), time.time_ns()
        try:
            reply = await self._with_retries(self.providers[role], request, deadline)
        except (ProviderFailed, LoopTimeout) as exc:
            if self.on_answer is not None:
                failed = {"n": n, "role": role, "duration_ms": round((time.perf_counter() - t0) * 1000, 3)}
                error = ("timeout", "the loop's deadline passed") if isinstance(exc, LoopTimeout) else (
                    "provider_error", str(exc))
                self.on_answer(failed, profile.model, started_ns, provider=profile.provider, error=error)
            raise
        duration_ms = round((time.perf_counter() - t0) * 1000, 3)
        record = {
            "type": "model_answer", "run_id": self.run_id, "n": n, "role": role, "model": reply.model,
            "request_sha256": sha, "text": reply.text, "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens, "duration_ms": duration_ms,
        }
        self.journal(record)
        if self.on_answer is not None:
            self.on_answer(record, profile.model, started_ns, provider=profile.provider)
        return Answer(n, role, reply, duration_ms, False)

    def _reuse(self, n: int, role: str) -> Answer | None:
        if not self._recorded:
            return None
        rec = self._recorded[0]
        if rec.get("n") != n or rec.get("role") != role:
            self._recorded = []  # the run went another way: from here on, the models answer anew
            return None
        self._recorded.pop(0)
        reply = ModelReply(rec["text"], rec["input_tokens"], rec["output_tokens"], rec["model"])
        return Answer(n, role, reply, float(rec.get("duration_ms") or 0.0), True)

    async def _with_retries(self, provider: Any, request: ModelRequest, deadline: float) -> ModelReply:
        tries = 0
        while True:
            tries += 1
            left = deadline - trio.current_time()
            if left <= 0:
                raise LoopTimeout()
            try:
                with trio.move_on_at(deadline):
                    return await provider.complete(request, left)
                raise LoopTimeout()
            except ProviderError as exc:
                if not exc.retryable or tries >= MAX_TRIES:
                    raise ProviderFailed(_failure_text(exc, tries)) from None
                delay = exc.retry_after_s
                if delay is None:
                    delay = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (tries - 1)) * (0.5 + self.rng.random() / 2)
                if trio.current_time() + delay >= deadline:
                    raise LoopTimeout() from None  # retries stop at the loop's deadline
                await trio.sleep(delay)


def _failure_text(exc: ProviderError, tries: int) -> str:
    status = f" (HTTP {exc.status})" if exc.status else ""
    after = f" after {tries} tries" if tries > 1 else ""
    return f"{exc.kind}{status}{after}: {exc.message}"
