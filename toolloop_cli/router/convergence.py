"""Convergence rules: loops that budgets catch only late, seen in what the run has done so far.

- ``same_error {count, tool?}``: ``count`` receipts of one tool (any arguments), of status ``error``
  or ``timeout``, ended with the same ``error.kind`` and ``error.message`` (not necessarily in a row);
- ``ping_pong {count}``: the last ``2 × count`` proposed calls alternate between exactly two
  distinct (tool, canonical arguments) pairs, rejected proposals included;
- ``no_progress {count}``: ``count`` ``ok`` receipts in a row have a result that is empty (``null``,
  ``{}``, ``[]``, ``""``) or equal (canonical JSON) to a result already observed in the run; a
  receipt that is not ``ok`` breaks the row.

``Convergence`` is what the runner tells these rules (each proposal, each settled receipt); the
supervisor's state carries a snapshot of it (``SupervisorState.convergence``). The reason
functions are registered in ``supervisor.RULES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._canonical import sha256_of

if TYPE_CHECKING:
    from .supervisor import Rule, SupervisorState

#: the proposals kept for ``ping_pong`` (a rule's count is compared against at most half of them)
KEEP_PROPOSALS = 200
#: results an ``ok`` receipt may hold that say nothing
_EMPTY: tuple[Any, ...] = (None, {}, [], "")


@dataclass(frozen=True, slots=True)
class Seen:
    """A snapshot of what the convergence rules read."""

    #: receipts of status error or timeout, per (tool, error.kind, error.message)
    errors: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: the latest proposed calls, oldest first: (tool, canonical arguments' hash)
    proposals: tuple[tuple[str, str], ...] = ()
    #: ``ok`` receipts in a row, up to now, whose result was empty or seen before
    no_progress_row: int = 0


class Convergence:
    """What the run has done that the convergence rules look at, told by the runner as it goes."""

    def __init__(self) -> None:
        self._errors: dict[tuple[str, str, str], int] = {}
        self._proposals: list[tuple[str, str]] = []
        self._results: set[str] = set()
        self._row = 0

    def proposed(self, tool: str, args_sha: str) -> None:
        """A call was proposed (whether it was then rejected or not)."""
        self._proposals.append((tool, args_sha))
        if len(self._proposals) > KEEP_PROPOSALS:
            del self._proposals[0]

    def settled(self, tool: str, status: str, result: Any, error: Any) -> None:
        """A call of the loop got its receipt (or a resume kept it)."""
        if status in ("error", "timeout") and isinstance(error, dict):
            key = (tool, str(error.get("kind")), str(error.get("message")))
            self._errors[key] = self._errors.get(key, 0) + 1
        if status != "ok":
            self._row = 0
            return
        digest = sha256_of(result)
        empty = any(result == e and type(result) is type(e) for e in _EMPTY)
        self._row = self._row + 1 if empty or digest in self._results else 0
        self._results.add(digest)

    def seen(self) -> Seen:
        return Seen(dict(self._errors), tuple(self._proposals), self._row)


def same_error(rule: Rule, s: SupervisorState) -> str | None:
    assert rule.count is not None
    for (tool, kind, message), n in sorted(s.convergence.errors.items()):
        if (rule.tool is None or tool == rule.tool) and n >= rule.count:
            shown = message if len(message) <= 120 else message[:120] + "…"
            return f"'{tool}' failed {n} times with the same error ({kind}: {shown}) (limit {rule.count})"
    return None


def ping_pong(rule: Rule, s: SupervisorState) -> str | None:
    assert rule.count is not None
    last = s.convergence.proposals[-2 * rule.count:]
    if len(last) < 2 * rule.count or len(set(last)) != 2:
        return None
    if any(last[i] == last[i + 1] for i in range(len(last) - 1)):
        return None
    a, b = sorted({last[0][0], last[1][0]})
    return (f"the last {len(last)} proposed calls alternate between two calls ('{a}' and '{b}')"
            f" (limit {rule.count} round trips)")


def no_progress(rule: Rule, s: SupervisorState) -> str | None:
    assert rule.count is not None
    n = s.convergence.no_progress_row
    if n < rule.count:
        return None
    return f"{n} ok results in a row were empty or repeated an earlier result (limit {rule.count})"
