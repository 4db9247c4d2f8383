"""A case's fixture: a ``runs export`` file read into the model answers a replay gives back, the
receipts a recorded case takes its tool results from, and the requests the answers answered."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..providers.replay import FixtureError, answer_from_record

__all__ = ["Fixture", "FixtureError", "load_fixture", "request_text"]


@dataclass(frozen=True)
class Fixture:
    path: str
    answers: list[dict]  # model_answer records, in recorded order
    receipts: dict[int, dict] = field(default_factory=dict)  # the recorded run's own receipts, by seq
    summary: dict | None = None


def load_fixture(path: str | os.PathLike[str]) -> Fixture:
    """The fixture at ``path``; ``FixtureError`` names the line at fault."""
    import orjson

    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise FixtureError(name, 0, f"fixture file cannot be read ({exc.strerror or type(exc).__name__})") from None
    answers: list[dict] = []
    receipts: dict[int, dict] = {}
    summary = None
    run_id = None
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise FixtureError(name, i, f"line is not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise FixtureError(name, i, "line is not a JSON object")
        kind = record.get("type")
        if kind == "model_answer":
            try:
                answer_from_record(record)
            except ValueError as exc:
                raise FixtureError(name, i, f"model_answer record: {exc}") from None
            answers.append(record)
        elif kind == "summary" and summary is None:
            summary = record
            run_id = record.get("run_id")
        elif kind == "receipt" and isinstance(record.get("seq"), int) and isinstance(record.get("tool"), str):
            receipts.setdefault(record["seq"], record)
    if run_id is not None:  # an export holds its own run's receipts; any other run's are not its calls
        receipts = {s: r for s, r in receipts.items() if r.get("run_id") in (None, run_id)}
    if not answers:
        raise FixtureError(name, 0, "fixture holds no model_answer records")
    return Fixture(name, answers, receipts, summary)


def request_text(answer: dict) -> str | None:
    """The text of the request a recorded answer answered (None when the recording lacks it)."""
    text = answer.get("request")
    return text if isinstance(text, str) else None
