"""The provider seam: a model request in, a reply with its token usage out.

A provider makes one request per call, non-streaming, with no retries or deadlines of its own:
the engine's routed runner retries what ``ProviderError.retryable`` says may be retried, honours
``retry_after_s``, and bounds everything by the loop's deadline.

    ProviderError.kind
    ├── connection     the server could not be reached, or did not answer in time  (retryable)
    ├── rate_limited   HTTP 429                                                    (retryable)
    ├── server         HTTP 5xx                                                    (retryable)
    ├── client         any other refusal: 4xx, a missing key variable, a replay that ran out
    └── bad_reply      a 2xx reply that cannot be used: no text, not JSON, or token usage that is
                       not a count (a negative or fractional number, text)

Messages name the server by scheme, host and port (``shown_url``) and say what went wrong; the
engine adds which profile asked.

An API key is read from its environment variable when each request is made, sent in a header
and nowhere else: no message, repr or traceback of this package ever holds it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Protocol

from .._canonical import sha256_of

ERROR_KINDS = ("connection", "rate_limited", "server", "client", "bad_reply")
_RETRYABLE = frozenset({"connection", "rate_limited", "server"})


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens (never defaulted)."""

    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1_000_000


@dataclass(frozen=True, slots=True)
class Profile:
    """A model profile as admitted: every value explicit, ``fixture`` resolved to a path."""

    provider: str
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    price: Price | None = None
    fixture: str | None = None


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One non-streaming request. ``role`` (router, final, judge) lets a replay check that the
    run asks for the answers in the order they were recorded."""

    messages: tuple[Mapping[str, str], ...] | list[Mapping[str, str]]
    model: str | None
    temperature: float | None = None
    max_tokens: int | None = None
    json_mode: bool = False
    role: str | None = None

    def sha256(self) -> str:
        """Hash of what is asked (messages, model, sampling): the ``request_sha256`` of a
        recorded answer."""
        return sha256_of({"messages": [dict(m) for m in self.messages], "model": self.model,
                          "temperature": self.temperature, "max_tokens": self.max_tokens,
                          "json_mode": self.json_mode})


#: what a reply stopped at the output token limit is called in messages
CUT = "cut off at the output token limit (max_tokens) before it ended"


@dataclass(frozen=True, slots=True)
class ModelReply:
    """A model's reply. ``usage_reported`` is False when the server said nothing of its token
    usage (the counts are then 0); ``cut`` when it stopped at the output token limit, so the
    text ends where the limit fell rather than where the model meant it to."""

    text: str
    input_tokens: int
    output_tokens: int
    model: str
    usage_reported: bool = True
    cut: bool = False


class ProviderError(Exception):
    """A request that got no usable reply; see the module docstring for the kinds."""

    def __init__(self, kind: str, message: str, *, status: int | None = None, retryable: bool | None = None,
                 retry_after_s: float | None = None, exhausted: bool = False):
        if kind not in ERROR_KINDS:
            raise ValueError(f"unknown provider error kind {kind!r}")
        self.kind = kind
        self.exhausted = exhausted  # a replay asked for more answers than were recorded
        self.message = message
        self.status = status
        self.retryable = kind in _RETRYABLE if retryable is None else retryable
        self.retry_after_s = retry_after_s
        super().__init__(message)

    def __repr__(self) -> str:
        return f"ProviderError({self.kind!r}, {self.message!r}, status={self.status!r}, retry_after_s={self.retry_after_s!r})"


class Provider(Protocol):
    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply: ...

    async def aclose(self) -> None: ...


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds or an HTTP date; ``None``
    when absent or unreadable; never negative."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN or infinite
        return None
    return max(seconds, 0.0)


class ProfileAdmission(Protocol):
    """What a provider's profile check may use of the admission that calls it."""

    def add(self, code: str, message: str, path: tuple[Any, ...] = (), hint: str = "", at_key: bool = False) -> None:
        """A finding at ``path`` inside the plan."""

    def resolve(self, relative: str) -> str:
        """A path the plan names, relative to the plan's folder."""

    def fixture(self, path: str, given: str, at: tuple[Any, ...]) -> bool:
        """Read a fixture of recorded answers now (kept for the run); False after a finding."""


@dataclass(frozen=True, slots=True)
class ProviderKind:
    """What a provider module registers: how a provider is made from an admitted profile, and
    the checks a profile naming it must pass at admission.

    ``make(profile, env=, plan_dir=, replay_answers=)``: ``env`` is where API keys are read (at
    request time), ``plan_dir`` resolves relative paths, ``replay_answers`` a shared cursor
    over recorded answers. ``check(profile, at, admission)``: the profile as admitted (perhaps
    with paths resolved), or None after reporting what is wrong through ``admission``."""

    make: Callable[..., Provider]
    check: Callable[[Profile, tuple[Any, ...], ProfileAdmission], Profile | None]


def check_needs_model(profile: Profile, at: tuple[Any, ...], admission: ProfileAdmission) -> Profile | None:
    """The profile check of a provider that asks a named model: ``model`` set, no ``fixture``."""
    from .._text import quoted

    ok = True
    if profile.model is None or not profile.model.strip():
        where = at + ("model",) if profile.model is not None else at
        admission.add("TL410", f"provider {quoted(profile.provider)} needs a model", where,
                      "name the model explicitly, e.g. model: gpt-4.1-mini (models are never defaulted)",
                      at_key=profile.model is None)
        ok = False
    if profile.fixture is not None:
        admission.add("TL410", "'fixture' is only used by provider: replay", at + ("fixture",),
                      "remove it, or set provider: replay", at_key=True)
        ok = False
    return profile if ok else None


def resolved(fixture: str, plan_dir: str | os.PathLike[str] | None) -> str:
    """A fixture path the plan names, resolved against the plan's folder."""
    if plan_dir is None or os.path.isabs(fixture):
        return fixture
    return os.path.join(os.fspath(plan_dir), fixture)
