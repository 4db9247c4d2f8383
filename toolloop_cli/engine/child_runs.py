"""How a child run (a ``plan:`` tool) ends, as its parent's call sees it: the answer, a failure
carrying the child's outcome, or a pause that pauses the parent too; and where its journaled
context was redacted."""

from __future__ import annotations

from typing import Any

from .redact import REDACTED


class ChildResult:
    """A child run that ended ``final``: its answer is the call's result."""

    __slots__ = ("value", "child_run_id")

    def __init__(self, value: Any, child_run_id: str):
        self.value = value
        self.child_run_id = child_run_id


class ChildFailed(Exception):
    """A child run that ended with another outcome: an ``error`` receipt whose kind is it."""

    def __init__(self, kind: str, message: str, child_run_id: str):
        self.kind = kind
        self.child_run_id = child_run_id
        super().__init__(message)


class ChildPaused(BaseException):
    """A child run paused (for approval, or by its supervisor): its parent pauses too, without a
    receipt for the call, and ``resume`` of the parent resumes the child first. A BaseException so
    that the call path, which turns App failures into receipts, lets it through."""

    def __init__(self, child_run_id: str, call_key: str | None, paused_by: dict | None = None):
        self.child_run_id = child_run_id
        self.call_key = call_key
        self.paused_by = paused_by  # the child's summary's: what it waits for
        super().__init__(f"child run {child_run_id} paused")


def cut_short_child(ctx: Any, tool: Any, seq: int) -> dict | None:
    """The child run a ``plan:`` call at ``seq`` had started when the call was cut short (its
    timeout, a halt, a signal, the loop's end): it ended before the call's receipt is made, so the
    receipt names it (``child_run_id``) whichever runner the parent is. None for another tool, or
    when no child had started."""
    if getattr(tool, "kind", None) != "plan":
        return None
    store = ctx.services.cache
    found = store.child_run(ctx.config.run_id, seq) if store is not None else None
    return found if found is not None and found["status"] != "running" else None


def redacted_pointers(value: Any, shown: Any, at: str = "") -> list[str]:
    """The JSON Pointers at which ``shown`` (``value`` redacted) holds the marker instead of the
    value: a child run whose journaled context has any cannot be resumed or replayed on its own,
    since the journal never holds the value."""
    if isinstance(shown, str) and shown == REDACTED and value != REDACTED:
        return [at]
    if isinstance(value, dict) and isinstance(shown, dict):
        return [p for k in value if k in shown
                for p in redacted_pointers(value[k], shown[k], f"{at}/{str(k).replace('~', '~0').replace('/', '~1')}")]
    if isinstance(value, list) and isinstance(shown, list):
        return [p for i, (v, s) in enumerate(zip(value, shown)) for p in redacted_pointers(v, s, f"{at}/{i}")]
    return []

