"""SIGINT and SIGTERM for a command that runs a plan: counted from its first line to its output's
close (``held_signals``), and taken by the run's event loop while it goes (``RunSignals``), which
cancels what is in flight. A second signal, wherever it lands, exits at once with 130.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import trio

from .runstate import RunState

if TYPE_CHECKING:
    from .options import RunOptions

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SignalCount:
    """The SIGINT and SIGTERM a command has had. The first stops what it can; the second, wherever
    it lands, exits at once with 130: every receipt already written is committed, and calls
    without one are run again (or reported interrupted) by resume."""

    def __init__(self, notice: Callable[[str], None] | None):
        self.notice = notice
        self.seen = 0
        self.run_ended = False  # said in the notice of a signal that lands after the run

    def tell(self, text: str) -> None:
        if self.notice is not None:
            try:
                self.notice(text)
            except Exception:  # noqa: BLE001 - a notice must never break signal handling
                pass

    def first_or_force(self, sig: int, doing: str) -> None:
        name = signal.Signals(sig).name
        if self.seen:
            self.tell(f"{name} again: stopping now; every receipt written so far is in the journal")
            os._exit(130)
        self.seen += 1
        self.tell(f"{name}: {doing} (send it again to stop at once)")

    def held(self, sig: int, _frame: Any) -> None:
        """The handler while no run's event loop takes the signals (``held_signals``)."""
        self.first_or_force(sig, "writing what the run has done, then stopping" if self.run_ended
                           else "the run stops before its first call")


_HELD: SignalCount | None = None


@contextmanager
def held_signals(notice: Callable[[str], None] | None = None) -> Iterator[SignalCount | None]:
    """SIGINT and SIGTERM for the whole of a command that runs a plan: from before its run starts
    (loading, admission, opening the journal) until its output is closed. A run's own handling
    takes them while it goes (``RunSession.run``); before and after, they are counted, never a
    ``KeyboardInterrupt`` or a silent end, so the run's start, its summary and its output are never
    cut off half-way. A signal before the run makes it start interrupted (its summary says so,
    exit 130); one after its summary is written changes nothing; a second exits at once with 130.
    Nested uses share the outer count; off the main thread this does nothing."""
    global _HELD
    if _HELD is not None or threading.current_thread() is not threading.main_thread():
        yield _HELD
        return
    count = SignalCount(notice)
    previous = {sig: signal.signal(sig, count.held) for sig in _SIGNALS}
    _HELD = count
    try:
        yield count
    finally:
        _HELD = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class RunSignals:
    """SIGINT and SIGTERM for the length of a run.

    Outside the event loop (journaling the plan, flushing the journal) a plain handler only
    records the request: nothing is in flight then, and lanes check the flag before each call.
    Inside it, trio's signal receiver cancels the calls in flight from the loop's own thread.
    Signals are counted with those the command had before the run (``held_signals``): one that
    came before makes the run start interrupted, and after the run the command's count goes on.
    """

    def __init__(self, state: RunState, options: RunOptions):
        self.state = state
        self.enabled = options.handle_signals and threading.current_thread() is threading.main_thread()
        self.count = _HELD if self.enabled and _HELD is not None else SignalCount(options.on_signal)
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "RunSignals":
        if self.enabled:
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._outside)
            if self.count.seen:
                self.state.interrupted = True  # a signal while the command started: nothing runs
        return self

    def __exit__(self, *exc: Any) -> None:
        self.count.run_ended = True
        for sig, handler in self._previous.items():
            # the command's own handler when there is one (ray.init, run in between, sets its own)
            signal.signal(sig, self.count.held if self.count is _HELD else handler)

    def _first_or_force(self, sig: int) -> None:
        self.count.first_or_force(sig, "cancelling the calls in flight")

    def _outside(self, sig: int, frame: Any) -> None:
        if self.count.run_ended:  # the loop is over: the outcome is known
            self.count.held(sig, frame)
            return
        self._first_or_force(sig)
        self.state.interrupted = True

    async def watch(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(*_SIGNALS) as signals:
            task_status.started()
            async for sig in signals:
                self._first_or_force(sig)
                self.state.interrupt()
