"""Replay: answers recorded in an earlier run (its journal, or a fixture file exported with
``toolloop runs export``), handed out in recorded order. No network; the recorded token usage
is what the run is charged, so budgets end a replay where they ended the recording.

A fixture is JSON Lines. Lines whose ``type`` is ``model_answer`` are answers; every other
record (receipts, decisions, the summary) is ignored, so an export is a fixture as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping

from .base import ModelReply, ModelRequest, Profile, ProfileAdmission, ProviderError, ProviderKind, resolved

ROLES = ("router", "final", "judge")


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    """One ``model_answer`` record."""

    n: int
    role: str
    model: str
    text: str
    input_tokens: int
    output_tokens: int
    request_sha256: str | None = None
    run_id: str | None = None
    cut: bool = False  # the recorded reply stopped at the output token limit


class FixtureError(Exception):
    """A fixture that cannot serve: ``line`` is 0 for the file as a whole."""

    def __init__(self, path: str, line: int, message: str):
        self.path = path
        self.line = line
        self.message = message
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


def answer_from_record(record: dict[str, Any]) -> RecordedAnswer:
    """A ``model_answer`` record checked field by field; ``ValueError`` says what is wrong."""
    def need(key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> object:
        value = record.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"'{key}' is missing or not {'a string' if kind is str else 'an integer'}")
        return value

    n, text, model = need("n", int), need("text", str), need("model", str)
    role = need("role", str)
    if role not in ROLES:
        raise ValueError(f"'role' must be one of {', '.join(ROLES)}")
    tin, tout = need("input_tokens", int), need("output_tokens", int)
    if tin < 0 or tout < 0:  # type: ignore[operator]
        raise ValueError("token counts cannot be negative")
    return RecordedAnswer(n, role, model, text, tin, tout,  # type: ignore[arg-type]
                          need("request_sha256", str, optional=True), need("run_id", str, optional=True),  # type: ignore[arg-type]
                          record.get("truncated") is True)


def fixture_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each record of a fixture file with its 1-based line (blank lines skipped);
    ``FixtureError`` names the file, or the line, at fault."""
    import orjson

    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        raise FixtureError(name, 0, "fixture file not found") from None
    except IsADirectoryError:
        raise FixtureError(name, 0, "fixture path is a folder, not a file") from None
    except OSError as exc:
        raise FixtureError(name, 0, f"fixture file cannot be read ({exc.strerror or type(exc).__name__})") from None
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise FixtureError(name, i, f"line is not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise FixtureError(name, i, "line is not a JSON object")
        yield i, record


def checked_answer(name: str, line: int, record: dict[str, Any]) -> RecordedAnswer:
    """A fixture line's ``model_answer`` record, checked; ``FixtureError`` names the line."""
    try:
        return answer_from_record(record)
    except ValueError as exc:
        raise FixtureError(name, line, f"model_answer record: {exc}") from None


def read_fixture(path: str | os.PathLike[str]) -> tuple[RecordedAnswer, ...]:
    """The answers of a fixture file, in file order; ``FixtureError`` names the line at fault."""
    name = os.fspath(path)
    answers = tuple(checked_answer(name, i, record) for i, record in fixture_records(name)
                    if record.get("type") == "model_answer")
    if not answers:
        raise FixtureError(name, 0, "fixture holds no model_answer records")
    return answers


class ReplayAnswers:
    """A cursor over recorded answers, shared by every replay profile of a run."""

    def __init__(self, answers: Iterable[RecordedAnswer], source: str = "the recording"):
        self.answers = tuple(answers)
        self.source = source
        self.position = 0

    @classmethod
    def from_fixture(cls, path: str | os.PathLike[str]) -> ReplayAnswers:
        return cls(read_fixture(path), os.fspath(path))

    def take(self, role: str | None) -> RecordedAnswer:
        if self.position >= len(self.answers):
            raise ProviderError("client", f"{self.source} has no answer left ({len(self.answers)} recorded); "
                                          "the run asked for more than was recorded", exhausted=True)
        answer = self.answers[self.position]
        if role is not None and answer.role != role:
            raise ProviderError("client", f"{self.source}: recorded answer {self.position + 1} is a '{answer.role}' "
                                          f"answer but the run asked for '{role}'; the run diverged from the recording")
        self.position += 1
        return answer


class ReplayProvider:
    """Answers from a recording: no network, the recorded usage charged."""

    name = "replay"

    def __init__(self, answers: ReplayAnswers):
        self.answers = answers

    def __repr__(self) -> str:
        return f"ReplayProvider(source={self.answers.source!r}, position={self.answers.position})"

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        a = self.answers.take(request.role)
        return ModelReply(a.text, a.input_tokens, a.output_tokens, a.model, cut=a.cut)

    def reused(self, role: str) -> None:
        """A resumed run reused an answer it had journaled (the fixture gave it before the run
        stopped): the cursor moves past it, so the next request gets the answer after it, never
        answer 1 again."""
        if self.answers.position < len(self.answers.answers):
            self.answers.position += 1

    async def aclose(self) -> None:
        return None


class ForkProvider:
    """A fork's profile: the recorded answers of the turns before the fork first (shared by every
    profile, as in a replay), then the live provider. ``close_live``: whether closing this closes
    the live provider too (not when the caller gave it)."""

    def __init__(self, recorded: ReplayAnswers, live: Any, *, close_live: bool = True):
        self.recorded = recorded
        self.live = live
        self.close_live = close_live
        self.name = getattr(live, "name", "fork")

    def __repr__(self) -> str:
        return f"ForkProvider(recorded={self.recorded!r}, live={self.live!r})"

    @property
    def server(self) -> Any:
        return getattr(self.live, "server", None)

    async def complete(self, request: ModelRequest, timeout_s: float) -> ModelReply:
        if self.recorded.position < len(self.recorded.answers):
            a = self.recorded.take(request.role)
            return ModelReply(a.text, a.input_tokens, a.output_tokens, a.model, cut=a.cut)
        reply: ModelReply = await self.live.complete(request, timeout_s)
        return reply

    async def aclose(self) -> None:
        if self.close_live:
            await self.live.aclose()


def _make(profile: Profile, *, env: Mapping[str, str], plan_dir: str | os.PathLike[str] | None = None,
          replay_answers: Any = None) -> ReplayProvider:
    if replay_answers is None:
        if profile.fixture is None:
            raise ValueError("a replay profile needs a fixture, or recorded answers")
        replay_answers = ReplayAnswers.from_fixture(resolved(profile.fixture, plan_dir))
    return ReplayProvider(replay_answers)


def _check(profile: Profile, at: tuple[Any, ...], admission: ProfileAdmission) -> Profile | None:
    """A replay profile names a fixture that is read now (its path resolved against the plan's
    folder); it asks no model, so ``model`` is optional."""
    if profile.fixture is None:
        admission.add("TL410", "a replay profile needs 'fixture' (recorded answers, as written by runs export)", at,
                      "add fixture: fixtures/NAME.jsonl (relative to the plan)", at_key=True)
        return None
    path = admission.resolve(profile.fixture)
    if not admission.fixture(path, profile.fixture, at + ("fixture",)):
        return None
    return replace(profile, fixture=path)


KIND = ProviderKind(make=_make, check=_check)
