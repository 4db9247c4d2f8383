"""Settlement: the one place a settled record is counted, committed, ordered and emitted.

A receipt is *settled* when its call has ended (or will never run). From there:

1. it is **counted** (per status) and shown to the run's listeners (a halt policy);
2. it is **committed**: handed to the journal at once, in completion order;
3. it is **ordered**: held until every receipt before it in input order (``seq``) is settled;
4. it is **emitted**: handed on for output once committed (the journal's output thread writes it
   only after its transaction), followed by the receipts of the calls it dispatched (depth first,
   in the order they finished), which are counted and committed at that moment.

With ``completion_order`` (``--order completion``) step 3 is left out: each receipt is emitted as
soon as it is committed; ``seq`` still gives the input order, and the journal is the same.

Every record is scrubbed of the run's secrets (``RunSecrets``: credentials it read, values a
model proposed for redacted fields) on its way to the journal, whichever path built it.

Receipts kept from an earlier session of the run (``resume``) are counted and ordered with the
new ones; those the journal already holds as they are are not committed again. Other record types
(a routed loop's decisions, supervisor and guardrail records) are committed and emitted at once,
in the order they are recorded (``record``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import trio

from ..receipts import STATUSES, Receipt
from .dispatch_order import take_dispatched
from .redact import scrub_record

Sink = Callable[[Receipt], None]


def _seq(receipt: Receipt) -> int:
    return receipt.seq


class Children:
    """Receipts of dispatched calls waiting to be emitted right after their parent's."""

    __slots__ = ("_by_parent",)

    def __init__(self) -> None:
        self._by_parent: dict[int, list[Receipt]] = {}

    def add(self, parent_seq: int, receipt: Receipt) -> None:
        self._by_parent.setdefault(parent_seq, []).append(receipt)

    def __bool__(self) -> bool:
        """Whether any dispatched receipt waits for its parent's."""
        return bool(self._by_parent)

    def take(self, parent_seq: int) -> list[Receipt]:
        """The receipts dispatched by the call ``parent_seq`` (and by those, depth first), in the
        order they finished; each is handed out once."""
        if not self._by_parent:
            return []
        return take_dispatched(self._by_parent, parent_seq, _seq)


class Settlement:
    """Counts, commits, orders and emits one run's records.

    ``journal`` (a ``store.JournalWriter`` or anything with ``commit``, ``emit`` and ``__call__``)
    commits records and hands them on for output after their commit; without one, records go
    straight to ``sink`` (in-process runs). ``on_emit`` sees each receipt as it is emitted
    (progress). ``counts`` may be given to share a dict with the runner's state.
    """

    def __init__(self, sink: Sink | None = None, *, journal: Any = None, children: Children | None = None,
                 on_emit: Sink | None = None, record_sink: Callable[[dict[str, Any]], None] | None = None,
                 counts: dict[str, int] | None = None, completion_order: bool = False, secrets: Any = None):
        self.counts = counts if counts is not None else {s: 0 for s in STATUSES}
        self.children = children if children is not None else Children()
        self.listeners: list[Sink] = []
        #: see each receipt this session commits, once (the calls it settles, the receipts resume
        #: itself settles, dispatched calls) and each other record (telemetry)
        self.observers: list[Sink] = []
        self.record_observers: list[Callable[[dict[str, Any]], None]] = []
        self._sink = sink
        self._record_sink = record_sink
        self._journal = journal
        self._on_emit = on_emit
        self._committed: dict[int, dict[str, Any]] = {}  # seq -> record committed, not yet emitted
        self._journaled: frozenset[int] = frozenset()  # kept receipts the journal holds as they are
        self._order: list[int] | None = None
        self._pending: dict[int, Receipt | None] = {}
        self.emitted = 0
        #: ``--order completion``: each receipt is emitted as soon as it is committed, not in input order
        self.completion_order = completion_order
        self.handed = 0  # receipts handed on for output, dispatched ones included
        self._waiters: list[tuple[int, trio.Event]] = []
        self._fresh: tuple[int, dict[str, Any]] | None = None  # a receipt emitted as it settles: committed with its emission
        #: the run's ``RunSecrets``: scrubbed from every record before it is journaled
        self.secrets = secrets

    def _record_of(self, receipt: Receipt, scrubbed_with: Any = None) -> dict[str, Any]:
        """The receipt's record, scrubbed of the run's secrets; ``scrubbed_with``: the run's scrubber
        the call path scrubbed the receipt's shown values with (``GovernedCall.scrubbed_with``),
        which are then not walked again while it is still the run's."""
        rec = receipt.as_record()
        secrets = self.secrets
        if not secrets:
            return rec
        return scrub_record(rec, secrets, shown_scrubbed=scrubbed_with is secrets.scrubber)

    # -- what comes in ------------------------------------------------------------------------

    def expect(self, seqs: Iterable[int] | None) -> None:
        """The seqs to emit, when they are not simply 0, 1, 2, … (a resume, or gaps)."""
        self._order = sorted(seqs) if seqs is not None else None

    def journaled(self, seqs: Iterable[int]) -> None:
        """Kept receipts with these seqs are in the journal exactly as they will be emitted."""
        self._journaled = frozenset(seqs)

    def settle(self, receipt: Receipt, scrubbed_with: Any = None) -> None:
        """A call of this session ended (or will never run). ``scrubbed_with``: see ``_record_of``."""
        self.counts[receipt.status] += 1
        for listener in self.listeners:
            listener(receipt)
        for observer in self.observers:
            observer(receipt)
        if self._journal is not None:
            rec = self._record_of(receipt, scrubbed_with)
            if self.completion_order or receipt.seq == self._next_seq():
                # emitted right now: one step commits it, then hands it on (still in completion order)
                self._fresh = (receipt.seq, rec)
            else:
                self._committed[receipt.seq] = rec
                self._journal.commit(rec)
        self._place(receipt.seq, receipt)

    def keep(self, receipt: Receipt) -> None:
        """A receipt settled in an earlier session of the run: counted and emitted in order."""
        self.counts[receipt.status] += 1
        self._place(receipt.seq, receipt)

    def skip(self, seq: int) -> None:
        """``seq`` will have no receipt in this session (its lane paused): emission moves past it."""
        self._place(seq, None)

    def record(self, rec: dict[str, Any]) -> None:
        """Any other record (a decision, a supervisor or guardrail record): committed and emitted
        now, after the receipts handed on so far."""
        if self.secrets:
            rec = scrub_record(rec, self.secrets)
        if self._journal is not None:
            self._journal.record(rec, self.handed)
        elif self._record_sink is not None:
            self._record_sink(rec)
        for observer in self.record_observers:
            observer(rec)

    # -- order --------------------------------------------------------------------------------

    def _next_seq(self) -> int | None:
        if self._order is None:
            return self.emitted
        return self._order[self.emitted] if self.emitted < len(self._order) else None

    def _place(self, seq: int, receipt: Receipt | None) -> None:
        if self.completion_order:
            if receipt is not None:
                self._emit(receipt)
            self.emitted += 1
            return
        self._pending[seq] = receipt
        nxt = self._next_seq()
        if nxt not in self._pending:
            return
        while nxt is not None and nxt in self._pending:
            ready = self._pending.pop(nxt)
            if ready is not None:
                self._emit(ready)
            self.emitted += 1
            nxt = self._next_seq()
        if self._waiters:
            woken = [w for w in self._waiters if w[0] <= self.emitted]
            if woken:
                self._waiters = [w for w in self._waiters if w[0] > self.emitted]
                for _, event in woken:
                    event.set()

    async def wait_for(self, count: int) -> None:
        """Return once at least ``count`` receipts have been emitted (the lookahead window)."""
        if self.emitted >= count or self.completion_order:
            return
        event = trio.Event()
        self._waiters.append((count, event))
        await event.wait()

    def flush(self) -> None:
        """Emit whatever is left (after an interruption), still in seq order."""
        for seq in sorted(self._pending):
            ready = self._pending.pop(seq)
            if ready is not None:
                self._emit(ready)

    # -- what goes out ------------------------------------------------------------------------

    def _emit(self, receipt: Receipt) -> None:
        self._hand_on(receipt)
        if not self.children:  # no dispatched receipt waits: nothing to look up
            return
        for child in self.children.take(receipt.seq):
            self.counts[child.status] += 1
            self._hand_on(child)

    def _hand_on(self, receipt: Receipt) -> None:
        self.handed += 1
        if self._on_emit is not None:
            self._on_emit(receipt)
        journal = self._journal
        if journal is not None:
            fresh = self._fresh
            if fresh is not None and fresh[0] == receipt.seq:
                self._fresh = None
                journal(fresh[1])  # settled just now: committed, then handed on
            elif (rec := self._committed.pop(receipt.seq, None)) is not None:
                journal.emit(rec)
            elif receipt.seq in self._journaled:
                journal.emit(self._record_of(receipt))
            else:  # settled outside this session's calls (resume's own receipts, dispatched calls)
                journal(self._record_of(receipt))
                for observer in self.observers:
                    observer(receipt)
        if self._sink is not None:
            self._sink(receipt)
