"""Every model request of a routed run: bounded by the loop's deadline, retried with backoff when
the provider says it may be (connection errors, 429, 5xx, honouring ``Retry-After``), journaled as
``model_answer`` records, and answered from the journal first when a run is resumed (a recorded
answer is reused when it was asked in the same place, by the same role: resume has already
checked that the plan and the contract are the ones the run used; a request's wording still
differs in what it says of the time left, so it is not compared. What can differ is a call the
resume runs again: the routed runner ends the reuse, ``went_past``, when the model would be shown
another observation of it than the one the recorded answers after it were given on).

Providers make one request each and keep no deadline of their own; this module owns both. It
also says, for a person, which profile failed and why (``ProviderFailed``), and what a reply's
token usage is worth: a reply that reports none counts 0 tokens, with one warning per run, unless
the run has a cost budget, whose spend would then be unknown (the reply is refused).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Sequence

import trio

from ..providers.base import ModelReply, ModelRequest, Profile, ProviderError

#: a request is tried at most this many times
MAX_TRIES = 5
BACKOFF_S = 0.25
MAX_BACKOFF_S = 8.0


class LoopTimeout(Exception):
    """The loop's deadline passed while a request was waiting (or would wait) for its answer."""

    def __init__(self, role: str):
        self.role = role
        super().__init__(f"while waiting for the {role} model")


class ProviderFailed(Exception):
    """A request got no usable answer after its retries; the message names the profile by its
    role, the server and the cause (never the key)."""


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

    ``journal`` commits each answer (a ``model_answer`` record), and returns once it has, before
    the loop uses it.
    ``recorded`` are the answers a resumed run already has, in order: each is reused while the run
    asks the same requests in the same order, and the first mismatch ends their reuse. The
    recorded answers the run then goes past are not its own: ``drop`` forgets them in the journal
    (from the mismatch on, before the new answer takes its number; or through ``went_past``, when
    a call run again changed what the model is shown, or at the end of a run that ended before
    reaching them). Their tokens are never charged: an answer is charged when it is reused.
    """

    def __init__(self, providers: Mapping[str, Any], *, run_id: str, journal: Callable[[dict], Awaitable[None]],
                 recorded: Sequence[dict] = (), rng: Any = None,
                 on_answer: Callable[..., None] | None = None,
                 warn: Callable[[str], None] | None = None,
                 drop: Callable[[int], None] | None = None):
        import random

        self.warn = warn  # one line for a person (standard error in the CLI)
        self._warned_usage = False
        # telemetry: (model_answer record, requested model, start in ns, provider=..., error=...);
        # a request that got no answer is reported too, with a record of its n, role and duration
        self.on_answer = on_answer
        self.providers = providers
        self.run_id = run_id
        self.journal = journal
        self._recorded = list(recorded)
        self._drop = drop
        self._next = 0
        self.rng = rng or random.Random()
        self.count = 0  # requests made (a retried request counts once)

    @property
    def replaying(self) -> bool:
        """Whether recorded answers are still being reused (a resumed run not yet where it stopped)."""
        return bool(self._recorded)

    def will_reuse(self, role: str) -> bool:
        """Whether the next request, asked by ``role``, takes a recorded answer instead of a model's."""
        return self._matches(self._next + 1, role)

    def _matches(self, n: int, role: str) -> bool:
        return bool(self._recorded) and self._recorded[0].get("n") == n and self._recorded[0].get("role") == role

    async def ask(self, role: str, profile: Profile, messages: list[dict], *, deadline: float,
                  max_tokens: int | None, turn: int = 0, cost_budget: bool = False) -> Answer:
        """One request by ``role`` at ``turn`` (for messages). ``cost_budget``: the run counts
        dollars, so a reply that does not say what it used cannot be accepted."""
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
        provider = self.providers[role]
        try:
            reply = await self._with_retries(provider, request, deadline, role, turn)
        except (ProviderFailed, LoopTimeout) as exc:
            if self.on_answer is not None:
                failed = {"n": n, "role": role, "duration_ms": round((time.perf_counter() - t0) * 1000, 3)}
                error = ("timeout", "the loop's deadline passed") if isinstance(exc, LoopTimeout) else (
                    "provider_error", str(exc))
                self.on_answer(failed, profile.model, started_ns, provider=profile.provider, error=error)
            raise
        duration_ms = round((time.perf_counter() - t0) * 1000, 3)
        if not reply.usage_reported:
            self._no_usage(role, provider, cost_budget)
        record = {
            "type": "model_answer", "run_id": self.run_id, "n": n, "role": role, "model": reply.model,
            "request_sha256": sha, "request": request_text(request), "text": reply.text,
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens, "duration_ms": duration_ms,
        }
        if reply.cut:
            record["truncated"] = True
        await self.journal(record)
        if self.on_answer is not None:
            self.on_answer(record, profile.model, started_ns, provider=profile.provider)
        return Answer(n, role, reply, duration_ms, False)

    def went_past(self) -> None:
        """The run will reuse none of the recorded answers it has not reused yet (it went another
        way, a call run again shows the model something else than they were given on, or it ended
        before reaching them): they are dropped from the journal."""
        left, self._recorded = self._recorded, []
        first = left[0].get("n") if left else None
        if isinstance(first, int) and self._drop is not None:
            self._drop(first)

    def _no_usage(self, role: str, provider: Any, cost_budget: bool) -> None:
        server = getattr(provider, "server", None)
        who = f"the server {server}" if server else "the provider"
        if cost_budget:
            raise ProviderFailed(f"{role} profile: {who} reported no token usage, so the reply's cost cannot be"
                                 " known and the run has a cost budget (max_cost_usd); the reply is refused")
        if not self._warned_usage and self.warn is not None:
            self._warned_usage = True
            self.warn(f"{role} profile: {who} reports no token usage; its replies count 0 tokens"
                      " against max_tokens")

    def _reuse(self, n: int, role: str) -> Answer | None:
        if not self._recorded:
            return None
        if not self._matches(n, role):
            self.went_past()  # the run went another way: from here on, the models answer anew
            return None
        rec = self._recorded.pop(0)
        moved = getattr(self.providers.get(role), "reused", None)
        if moved is not None:  # a provider answering in order (a replay fixture) moves past the reused answer
            moved(role)
        reply = ModelReply(rec["text"], rec["input_tokens"], rec["output_tokens"], rec["model"],
                           cut=rec.get("truncated") is True)
        return Answer(n, role, reply, float(rec.get("duration_ms") or 0.0), True)

    async def _with_retries(self, provider: Any, request: ModelRequest, deadline: float, role: str,
                            turn: int) -> ModelReply:
        tries = 0
        while True:
            tries += 1
            left = deadline - trio.current_time()
            if left <= 0:
                raise LoopTimeout(role)
            try:
                with trio.move_on_at(deadline):
                    return await provider.complete(request, left)
                raise LoopTimeout(role)
            except ProviderError as exc:
                if not exc.retryable or tries >= MAX_TRIES:
                    raise ProviderFailed(failure_text(exc, role, turn, tries)) from None
                delay = exc.retry_after_s
                if delay is None:
                    delay = min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (tries - 1)) * (0.5 + self.rng.random() / 2)
                if trio.current_time() + delay >= deadline:
                    raise LoopTimeout(role) from None  # retries stop at the loop's deadline
                await trio.sleep(delay)


def failure_text(exc: ProviderError, role: str, turn: int, tries: int) -> str:
    """Why a request failed, for a person: the profile by its role, then the provider's own words
    (the server by scheme, host and port, and the cause)."""
    if exc.exhausted:
        return f"{role} profile: fixture exhausted at turn {turn} ({exc.message})"
    after = f" ({tries} tries)" if tries > 1 else ""
    return f"{role} profile: {exc.message}{after}"


def request_text(request: ModelRequest) -> str:
    """A request as text, one block per message (what ``requests_unchanged`` diffs): the record's
    ``request``, scrubbed of the run's secrets with the rest of the record."""
    return "".join(f"[{m.get('role')}]\n{m.get('content')}\n" for m in request.messages)
