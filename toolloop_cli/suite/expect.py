"""Checking what a case's run did against what the case expects: pure functions over the run's
summary, receipts and model answers, each failure ``{expect, wanted, got}`` naming the
expectation that did not hold (``final.refunded``, ``calls[1]``, ``never[0]``, ...)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from .models import CallExpect, ExpectDecl

#: the error kind of a call a recorded case had no result for (the check names it by turn)
NOT_RECORDED = "not_recorded"
#: the error kind of a fault laid over a call by a case
FAULT = "fault"

_MISSING = {"missing": True}  # what `got` shows for a key the answer lacks
_EXHAUSTED = re.compile(r"fixture exhausted at turn (\d+)")


@dataclass
class Verdict:
    """How one run of a case went: ``error`` when it could not start or ended in a way no
    expectation covers, else ``fail`` with its failures, or ``pass``."""

    status: str
    failures: list[dict] = field(default_factory=list)
    diff: str | None = None


def failure(expect: str, wanted: Any, got: Any) -> dict:
    return {"expect": expect, "wanted": wanted, "got": got}


def subset_failures(name: str, wanted: Any, got: Any) -> list[dict]:
    """Each key of ``wanted`` must be equal in ``got``: mappings are compared key by key (a subset,
    at every depth), anything else (lists included) whole."""
    if isinstance(wanted, dict):
        if not isinstance(got, dict):
            return [failure(name, wanted, got)]
        out = []
        for key, value in wanted.items():
            out += subset_failures(f"{name}.{key}", value, got[key]) if key in got else [
                failure(f"{name}.{key}", value, _MISSING)]
        return out
    return [] if _same(wanted, got) else [failure(name, wanted, got)]


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def _matches(want: CallExpect, receipt: dict) -> bool:
    if receipt.get("tool") != want.tool:
        return False
    if want.status is not None and receipt.get("status") != want.status:
        return False
    return want.args is None or not subset_failures("args", want.args, receipt.get("args"))


def _shown(receipt: dict) -> dict:
    return {"tool": receipt.get("tool"), "status": receipt.get("status"), "args": receipt.get("args")}


def calls_failures(wanted: list[CallExpect], receipts: list[dict]) -> list[dict]:
    """The receipts, in order, hold ``wanted`` as a subsequence. The first item that cannot be
    matched after the ones before it fails (the later ones are not judged): ``got`` lists the
    receipts of that tool after the last match."""
    at = 0
    for i, want in enumerate(wanted):
        j = next((k for k in range(at, len(receipts)) if _matches(want, receipts[k])), None)
        if j is None:
            same_tool = [_shown(r) for r in receipts[at:] if r.get("tool") == want.tool]
            return [failure(f"calls[{i}]", want.model_dump(exclude_none=True), same_tool)]
        at = j + 1
    return []


def never_failures(never: list[str], receipts: list[dict]) -> list[dict]:
    out = []
    for i, tool in enumerate(never):
        found = [_shown(r) for r in receipts if r.get("tool") == tool]
        if found:
            out.append(failure(f"never[{i}]", f"no call of {tool}", found))
    return out


def _at_most(name: str, limit: float, got: float) -> list[dict]:
    return [] if got <= limit else [failure(name, limit, got)]


def request_diff(recorded: list[dict], answers: list[dict]) -> tuple[list[dict], str | None]:
    """The first model request of the run that differs from the recorded one (compared by their
    hash, shown as a unified diff of their text when both recordings hold it)."""
    for old, new in zip(recorded, answers):
        if old.get("request_sha256") is None:
            return [failure("requests_unchanged", f"request {old.get('n')} as recorded",
                            "the fixture holds no request for this answer; record it again with --record")], None
        if old.get("request_sha256") == new.get("request_sha256"):
            continue
        a, b = old.get("request"), new.get("request")
        diff = None
        if isinstance(a, str) and isinstance(b, str):
            diff = "".join(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                                f"recorded request {old.get('n')}", f"request {new.get('n')}"))
        return [failure("requests_unchanged", old.get("request_sha256"), new.get("request_sha256"))], diff
    return [], None


def run_problem(summary: dict | None, receipts: list[dict], expect: ExpectDecl) -> tuple[str, list[dict]] | None:
    """How a run ended that fails or errors its case whatever else it expects, as (status,
    failures): no summary or an interrupted run (error), a fixture that ran out, a call a recorded
    case had no result for, a pause the case did not expect."""
    if summary is None or summary.get("status") in ("rejected", "interrupted"):
        why = "the run ended with no summary" if summary is None else f"the run was {summary.get('status')}"
        return "error", [failure("run", "a run that ends", why)]
    fails = []
    for r in receipts:
        if (r.get("error") or {}).get("kind") == NOT_RECORDED:
            fails.append(failure("fixture", f"a recorded result for {r.get('tool')}",
                                 f"no recorded result for {r.get('tool')} at turn {r.get('iteration')}"))
    message = str((summary.get("error") or {}).get("message") or "")
    exhausted = _EXHAUSTED.search(message)
    if exhausted:
        fails.append(failure("fixture", "a recorded answer for every request",
                             f"fixture exhausted at turn {exhausted.group(1)}"))
    paused = summary.get("status") == "stopped" or summary.get("outcome") == "paused"
    if paused and expect.outcome is None:
        fails.append(failure("outcome", "a run that does not pause", "paused"))
    if fails:
        return "fail", fails
    if summary.get("outcome") == "provider_error" and expect.outcome != "provider_error":
        return "error", [failure("run", "a model that answers", message or "provider_error")]
    return None


def check_run(expect: ExpectDecl | None, summary: dict | None, receipts: list[dict], answers: list[dict],
              recorded: list[dict] | None = None, *, routed: bool = True) -> Verdict:
    """The verdict on one run of a case: ``receipts`` in input order, ``answers`` its model
    answers, ``recorded`` the fixture's (for ``requests_unchanged``)."""
    expect = expect or ExpectDecl()
    ended = run_problem(summary, receipts, expect)
    if ended is not None and ended[0] == "error":
        return Verdict("error", ended[1])
    assert summary is not None
    fails = (list(ended[1]) if ended is not None else []) + _ending_failures(expect, summary)
    fails += _receipt_failures(expect, receipts)
    fails += _spend_failures(expect, summary.get("loop") or {}, len(receipts), routed)
    diff = None
    if expect.requests_unchanged:
        more, diff = request_diff(recorded or [], answers)
        fails += more
    return Verdict("fail" if fails else "pass", fails, diff)


def _ending_failures(expect: ExpectDecl, summary: dict) -> list[dict]:
    fails = []
    if expect.outcome is not None and summary.get("outcome") != expect.outcome:
        fails.append(failure("outcome", expect.outcome, summary.get("outcome")))
    if expect.route is not None and summary.get("route") != expect.route:
        fails.append(failure("route", expect.route, summary.get("route")))
    if expect.final is not None:
        fails += subset_failures("final", expect.final, summary.get("final"))
    return fails


def _receipt_failures(expect: ExpectDecl, receipts: list[dict]) -> list[dict]:
    return (calls_failures(expect.calls, receipts) if expect.calls else []) + (
        never_failures(expect.never, receipts) if expect.never else [])


def _spend_failures(expect: ExpectDecl, loop: dict, n_receipts: int, routed: bool) -> list[dict]:
    """``max_tool_calls`` (a routed run's loop count, a batch run's receipts), ``max_tokens``
    (input and output together), ``max_cost_usd``."""
    fails = []
    if expect.max_tool_calls is not None:
        used = loop.get("tool_calls", n_receipts) if routed else n_receipts
        fails += _at_most("max_tool_calls", expect.max_tool_calls, used)
    if expect.max_tokens is not None:
        tokens = loop.get("tokens") or {}
        fails += _at_most("max_tokens", expect.max_tokens, int(tokens.get("input", 0)) + int(tokens.get("output", 0)))
    if expect.max_cost_usd is not None:
        fails += _at_most("max_cost_usd", expect.max_cost_usd, float(loop.get("cost_usd") or 0))
    return fails
