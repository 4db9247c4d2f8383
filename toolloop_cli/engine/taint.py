"""Untrusted content and writes: whether a routed run has been shown content written by someone
outside (a web page, a mail, a ticket), a run-scoped fact the gates read.

The first receipt of an untrusted tool (``output_trust: untrusted``; an MCP tool of a server that
is not trusted; a ``plan:`` tool whose child run was tainted) that the model is shown taints the
run for the rest of it, whatever a guardrail then masked or blocked: the model may have read
instructions meant for it. From then on every write or destructive call is handled by the plan's
``taint.on_write`` in the gates (``gates.check_call``): gated for a person (``approve``),
refused (``deny``) or let through (``allow``), and its receipt carries the source as ``taint``.

The fact is journaled: when it happens it is written among the run's options (``taint``), on the
journal thread, in order with the run's records. A run that goes on from its journal (``resume``;
``replay`` and a fork, which walk the recorded turns; a child run resumed on its own) restores it:
a child's inherited taint holds from its first turn, and a run's own is taken again when the walk
reaches the turn and tool that caused it, even where the plan now trusts that tool, with the
recorded ``tainted_by`` (so a replay names the receipt the recorded model was shown). A child run
started by a tainted run starts tainted with its parent's ``tainted_by``; a child that becomes
tainted tells its parent, whose model then reads the child's answer as untrusted.
"""

from __future__ import annotations

from typing import Any, Callable

from ..receipts import taint_text

#: the effects a taint gates
WRITES = frozenset({"write", "destructive"})

#: the run option the fact is journaled under
OPTION = "taint"


class RunTaint:
    """One routed run's taint: ``source`` is its ``tainted_by`` (``{tool, iteration, receipt_id}``)
    or None. ``journal`` is called with the fact's journal form when it happens."""

    __slots__ = ("on_write", "source", "inherited", "run_id", "_recorded", "_journal", "_parent", "_children")

    def __init__(self, on_write: str = "approve", *, parent: RunTaint | None = None,
                 journal: Callable[[dict[str, Any]], None] | None = None):
        self.on_write = on_write
        self.source: dict[str, Any] | None = None
        self.inherited = False
        self.run_id: str | None = None
        self._recorded: dict[str, Any] | None = None
        self._journal = journal
        self._parent = parent
        self._children: set[str] = set()
        if parent is not None and parent.source is not None:  # a child started by a tainted run
            self.source, self.inherited = parent.source, True

    # -- the journal ----------------------------------------------------------------------------

    def journal(self, write: Callable[[dict[str, Any]], None]) -> None:
        """Journal the fact through ``write`` when it happens (the run's option ``taint``)."""
        self._journal = write

    def journal_form(self) -> dict[str, Any] | None:
        """What the run's options hold of the fact (None while the run is not tainted)."""
        return None if self.source is None else {"tainted_by": self.source, "inherited": self.inherited}

    def restore(self, journaled: Any, before: int | None = None) -> None:
        """The fact as the journal holds it (``journal_form`` of an earlier session, or of the
        recorded run): an inherited taint holds at once, a run's own when the walk reaches it.
        ``before``: a fork's first live turn; a run's own taint met at it or later is not restored."""
        if not isinstance(journaled, dict) or not isinstance(journaled.get("tainted_by"), dict):
            return
        turn = journaled["tainted_by"].get("iteration")
        if before is not None and not journaled.get("inherited") and not (isinstance(turn, int) and turn < before):
            return
        if journaled.get("inherited"):
            if self.source is None:
                self.source, self.inherited = dict(journaled["tainted_by"]), True
        else:
            self._recorded = journaled["tainted_by"]

    # -- what the model is shown ----------------------------------------------------------------

    def shown(self, iteration: int, tool: Any, receipt: Any) -> bool:
        """The model is shown ``receipt`` of ``tool`` at ``iteration`` (its result or its error,
        guardrails or not): the first of an untrusted tool taints the run. True when this one did."""
        if self.source is not None:
            return False
        recorded = self._recorded
        again = recorded is not None and recorded.get("iteration") == iteration and recorded.get("tool") == tool.id
        untrusted = getattr(tool, "output_trust", "trusted") == "untrusted" or receipt.child_run_id in self._children
        if not (untrusted or again):
            return False
        # the journal's own words where it is restored: a replay's receipts and summary then name
        # the recorded source, as its recorded receipts do
        self.source = dict(recorded) if again and recorded is not None else {
            "tool": tool.id, "iteration": iteration, "receipt_id": receipt.receipt_id}
        if self._journal is not None:
            self._journal(self.journal_form() or {})
        if self._parent is not None and self.run_id is not None:
            self._parent.child_tainted(self.run_id)
        return True

    def child_tainted(self, run_id: str) -> None:
        """A child run of this one was tainted: its answer is untrusted content."""
        self._children.add(run_id)

    # -- the gates ------------------------------------------------------------------------------

    def of(self, tool: Any) -> dict[str, Any] | None:
        """The run's ``tainted_by`` when ``tool`` is a write or destructive tool and the run is
        tainted (what a call of it proposed now carries as ``taint``), else None."""
        if self.source is None or getattr(tool, "effect", "read") not in WRITES:
            return None
        return self.source

    def why(self) -> str:
        """What a taint gate shows a person: "after untrusted content from TOOL at turn N"."""
        return taint_text(self.source)

    def denied(self, tool: Any) -> str:
        """The message of a write refused by ``on_write: deny`` (the model sees it)."""
        src = self.source or {}
        return (f"'{tool.id}' was not run: the run was shown untrusted content from '{src.get('tool')}' at turn"
                f" {src.get('iteration')}, and taint.on_write is deny")


def recorded_run_id(answers: list[dict[str, Any]], receipts: dict[int, dict[str, Any]]) -> str | None:
    """The run a recording was read from (a replay's): the run id its records carry."""
    for rec in (*answers, *receipts.values()):
        if isinstance(rec.get("run_id"), str):
            return str(rec["run_id"])
    return None


def taint_of(ctx: Any, tool: Any) -> dict[str, Any] | None:
    """The ``taint`` of a receipt of ``tool`` made now in the run of ``ctx`` (None outside routed runs)."""
    taint = ctx.services.taint
    return None if taint is None else taint.of(tool)
