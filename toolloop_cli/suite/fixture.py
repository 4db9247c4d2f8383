"""A case's fixture: a ``runs export`` file read into the model answers a replay gives back, the
receipts a recorded case takes its tool results from, and the requests the answers answered."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..providers.replay import FixtureError, checked_answer, fixture_records

__all__ = ["Fixture", "FixtureError", "load_fixture", "request_text"]


@dataclass(frozen=True)
class Fixture:
    path: str
    answers: list[dict]  # model_answer records, in recorded order
    receipts: dict[int, dict] = field(default_factory=dict)  # the recorded run's own receipts, by seq
    summary: dict | None = None
    #: what each MCP tool's server offered when the run was admitted ("subagent/tool" -> offer),
    #: from the export's manifest; None when it holds none
    mcp_tools: dict | None = None


def load_fixture(path: str | os.PathLike[str]) -> Fixture:
    """The fixture at ``path``; ``FixtureError`` names the line at fault."""
    name = os.fspath(path)
    answers: list[dict] = []
    receipts: dict[int, dict] = {}
    summary = None
    mcp_tools = None
    for i, record in fixture_records(name):
        kind = record.get("type")
        if kind == "manifest" and isinstance(record.get("mcp_tools"), dict) and mcp_tools is None:
            mcp_tools = record["mcp_tools"]
        elif kind == "model_answer":
            checked_answer(name, i, record)
            answers.append(record)
        elif kind == "summary" and summary is None:
            summary = record
        elif kind == "receipt" and isinstance(record.get("seq"), int) and isinstance(record.get("tool"), str):
            receipts.setdefault(record["seq"], record)
    run_id = summary.get("run_id") if summary is not None else None
    if run_id is not None:  # an export holds its own run's receipts; any other run's are not its calls
        receipts = {s: r for s, r in receipts.items() if r.get("run_id") in (None, run_id)}
    if not answers:
        raise FixtureError(name, 0, "fixture holds no model_answer records")
    return Fixture(name, answers, receipts, summary, mcp_tools)


def request_text(answer: dict) -> str | None:
    """The text of the request a recorded answer answered (None when the recording lacks it)."""
    text = answer.get("request")
    return text if isinstance(text, str) else None
