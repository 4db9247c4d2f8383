"""What a runner may do to its run: the narrow handle ``RunSession`` gives the lanes runner and the
routed runner instead of itself.

A runner settles, keeps and skips receipts and records other records (``settlement``), pauses a
call for a person, journals a model's answer, reads and consumes operators' controls, has its
cancel scopes cancelled by a signal, and waits for the journal to hold what it handed on. It
does not open or close the run, touch its lease or write its summary: those stay with the session.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator

import trio

from .controls import control_holds

if TYPE_CHECKING:
    from ..contract.problems import Problem
    from ..receipts import Receipt
    from ..store import Store
    from ..store.journal import JournalWriter
    from .context import RunContext
    from .runstate import HaltPolicy, RunState
    from .settle import Settlement


class RunHandle:
    """One run as its runner sees it. ``ctx`` is the context its calls share (the gates and the
    call path take it); ``settlement`` and ``state`` are handed whole only to ``run_lanes``, which
    in-process callers also use without a session."""

    def __init__(self, *, ctx: RunContext, settlement: Settlement, state: RunState, store: Store,
                 journal: JournalWriter, committed: Callable[[], Awaitable[None]],
                 halt: HaltPolicy | None = None, warn: Callable[[str], None] | None = None,
                 on_rejected: Callable[[list[Problem]], None] | None = None,
                 on_model_answer: Callable[..., None] | None = None, providers: dict[str, Any] | None = None):
        self.ctx = ctx
        self.settlement = settlement
        self.state = state
        self.halt = halt
        self.warn = warn  # one line for a person (standard error in the CLI)
        self.on_rejected = on_rejected  # findings of a lane refused by ``run --stream``
        self.on_model_answer = on_model_answer  # telemetry of each model request
        self.providers = providers or {}  # provider instances the caller gave, by name (the caller closes them)
        self._store = store
        self._journal = journal
        self._committed = committed  # waits until all handed to the journal is committed (the session's)

    @property
    def run_id(self) -> str:
        return self.ctx.config.run_id

    # -- records ------------------------------------------------------------------------------

    def settle(self, receipt: Receipt) -> None:
        """A call of this session ended (or will never run): counted, committed, emitted in order."""
        self.settlement.settle(receipt)

    def keep(self, receipt: Receipt) -> None:
        """A receipt an earlier session of the run settled: counted and emitted in order."""
        self.settlement.keep(receipt)

    def skip(self, seq: int) -> None:
        """``seq`` gets no receipt in this session: emission moves past it."""
        self.settlement.skip(seq)

    def record(self, rec: dict[str, Any]) -> None:
        """A record other than a receipt (decision, supervisor, guardrail): committed and emitted now."""
        self.settlement.record(rec)

    def watch(self, observer: Callable[[Any], None]) -> None:
        """``observer`` sees every receipt and every other record handed to the journal."""
        self.settlement.observers.append(observer)
        self.settlement.record_observers.append(observer)

    def model_answer(self, rec: dict[str, Any]) -> None:
        """Journal a model's answer (already scrubbed of every secret) on the journal thread, in
        order with the run's records. The runner awaits ``synced()`` before an effect the answer
        leads to (a call's start, an approval's request), so it acts on an answer only when a
        resume would find it."""
        self._journal.answer(rec)  # in the transaction of the turn's decision

    def drop_went_past(self, from_n: int, from_seq: int) -> None:
        """The run went another way than the attempt that journaled its answers from ``from_n``
        on and its calls from ``from_seq`` on: they are moved out of the run's records, kept
        apart (on the journal thread, in order with the run's records)."""
        self._journal.write(self._store.move_went_past, self.run_id, from_n, from_seq, time.time())

    async def synced(self) -> None:
        """Return once the journal holds every record handed to it so far (as the session's
        ``committed`` waits: a run on its own clock does not let that clock run meanwhile)."""
        await self._committed()

    def set_total_calls(self, total: int) -> None:
        """The number of calls the run has, committed (by the journal thread) before its summary."""
        self._journal.write(self._store.set_total_calls, self.run_id, total)

    def set_option(self, key: str, value: Any) -> None:
        """Journal one of the run's options, what a resume reads back (a routed run's taint), on
        the journal thread, in order with the records handed to it."""
        self._journal.write(self._store.set_option, self.run_id, key, value)

    # -- pauses and signals -------------------------------------------------------------------

    def pause(self, item_key: str | None, call_key: str | None, child_run_id: str | None = None) -> None:
        """The call waits for a person (or its child run does): the run stops resumable."""
        self.state.paused.append((item_key, call_key, child_run_id))

    @property
    def interrupted(self) -> bool:
        """Whether a signal (or a failed writer) stopped the run."""
        return self.state.interrupted

    @contextmanager
    def cancelled_by_signals(self, scope: trio.CancelScope) -> Iterator[None]:
        """While inside, a signal cancels ``scope``."""
        self.state.in_flight.add(scope)
        try:
            yield
        finally:
            self.state.in_flight.discard(scope)

    # -- operators' controls --------------------------------------------------------------------

    def controls_after(self, seen: int) -> list[tuple[int, str, str | None, int | None]]:
        """Steer and abort sent to the run from number ``seen`` on: (n, kind, message, consumed at)."""
        return self._store.controls_after(self.run_id, seen)

    def control_holds(self, n: int, kind: str) -> bool:
        """Whether control ``n``'s link in the run's hash chain holds (one that does not is ignored,
        with a warning)."""
        return control_holds(self._store, self.run_id, n, kind, self.warn)

    def consume_control(self, n: int, turn: int) -> None:
        """Control ``n`` was acted on at ``turn``: a resume applies it there again, never twice.
        Committed by the journal thread before any record handed to it after (the one that acts on it)."""
        self._journal.write(self._store.consume_control, self.run_id, n, turn)
