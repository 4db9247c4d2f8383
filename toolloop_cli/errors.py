"""The exception tree, split by who is at fault.

    ToolloopError
    ├── UsageError        the command line is wrong (exit 2)
    ├── ConfigError       a registry or plan was rejected; carries Problems (exit 3, or 1 for validate)
    ├── RunError          a run could not go on (journal locked, contract drift on resume, ...)
    ├── StateError        the state database is damaged: a missing table, a malformed page, a
    │                     value that does not parse (exit 2 from every command)
    └── InternalError     a bug in toolloop itself

A tool call that fails is never an exception at this level: it is a receipt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .contract.problems import Problem


class ToolloopError(Exception):
    """Base of every error toolloop raises on purpose."""


class UsageError(ToolloopError):
    """The command line or an API argument is wrong (a missing file, a bad flag value)."""


class ConfigError(ToolloopError):
    """A registry or plan was rejected; ``problems`` lists every finding, sorted by place."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(problems, key=lambda p: p.sort_key)
        super().__init__(f"{len(self.problems)} problem(s)")


class RunError(ToolloopError):
    """A run cannot start or go on for a reason outside any single call."""


class StateError(ToolloopError):
    """The state database cannot be read as a journal: a table is missing, a page is malformed, a
    value does not parse or has the wrong type. Raised by the store's read layer, which fills in
    the file and, where it knows them, the run and the record; shown on one line, exit 2."""

    def __init__(self, problem: str, *, path: object = None, run_id: str | None = None,
                 record: str | None = None):
        self.problem, self.path, self.run_id, self.record = problem, path, run_id, record
        super().__init__(problem)

    def __str__(self) -> str:
        where = ", ".join(w for w in (f"run {self.run_id}" if self.run_id else None, self.record) if w)
        return (f"the state database {self.path or ''} is damaged{f' ({where})' if where else ''}: {self.problem};"
                " restore it from a copy, or use another --state-dir")


class InternalError(ToolloopError):
    """A bug in toolloop: please report it with the command that caused it."""


class DispatchError(ToolloopError):
    """Raised inside a callable when ``dispatch`` is refused or the dispatched call is not ok.

    ``receipt`` is the dispatched call's receipt (as a dict), or None when nothing ran.
    """

    def __init__(self, message: str, receipt: dict | None = None):
        self.receipt = receipt
        super().__init__(message)
