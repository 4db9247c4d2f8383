"""How a child run (a ``plan:`` tool, SPEC 6.7) ends, as its parent's call sees it: the answer,
a failure carrying the child's outcome, or a pause that pauses the parent too."""

from __future__ import annotations

from typing import Any


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

    def __init__(self, child_run_id: str, call_key: str | None):
        self.child_run_id = child_run_id
        self.call_key = call_key
        super().__init__(f"child run {child_run_id} paused")
