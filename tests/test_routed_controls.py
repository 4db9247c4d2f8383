"""Operators' abort while a routed call runs: the call's watch looks at the journal a poll after
the runner's own last look (taken just before the call's gate), then every poll, and at once
when the gate took longer than a poll; an abort is acted on at the first look after it came."""

from __future__ import annotations

from types import SimpleNamespace

import trio
import trio.testing

from toolloop_cli.engine.supervision import CONTROL_POLL_S, Supervision


class Journal:
    """The controls a run's journal holds, the times they were read at (the run's clock), and an
    abort that lands at ``abort_at``."""

    def __init__(self, abort_at: float):
        self.abort_at = abort_at
        self.reads: list[float] = []

    def controls_after(self, seen: int) -> list:
        now = trio.current_time()
        self.reads.append(now)
        return [(0, "abort", "stop", None)] if now >= self.abort_at and seen == 0 else []

    def control_holds(self, n: int, kind: str) -> bool:
        return True

    def consume_control(self, n: int, turn: int) -> None:
        pass


def watched(abort_at: float, gate_s: float) -> tuple[Journal, list[float], Supervision]:
    """The runner looks before the call's gate (at 0), the gate takes ``gate_s``, then the call's
    watch runs until an abort cancels the loop; returns the reads and when the loop was cancelled."""
    journal = Journal(abort_at)
    cancelled: list[float] = []
    runner = SimpleNamespace(spec=SimpleNamespace(supervisor=None), handle=journal, steer=[],
                             record_supervisor=lambda *a: None, scrubbed=lambda t: t,
                             cancel_loop=lambda: cancelled.append(trio.current_time()))
    supervision = Supervision(runner)  # type: ignore[arg-type]

    async def main() -> None:
        assert not supervision.abort_waiting()  # the runner's look before the gate
        await trio.sleep(gate_s)
        with trio.fail_after(100):
            supervision.call_started(1)
            await supervision.watch_calls()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return journal, cancelled, supervision


def test_the_calls_watch_looks_a_poll_after_the_runners_last_look_then_every_poll():
    journal, cancelled, supervision = watched(abort_at=1.0, gate_s=0.0)
    assert journal.reads[0] == 0.0  # the runner's look
    assert journal.reads[1] == CONTROL_POLL_S  # not again at once: it has just looked
    assert all(abs(b - a - CONTROL_POLL_S) < 1e-9 for a, b in zip(journal.reads[1:], journal.reads[2:-1]))
    assert cancelled and cancelled[0] - 1.0 <= CONTROL_POLL_S  # seen within a poll of coming
    assert supervision.aborted == "aborted by an operator: stop"


def test_a_call_whose_gate_took_longer_than_a_poll_is_watched_at_once():
    journal, cancelled, _ = watched(abort_at=0.5, gate_s=3.0)  # the abort came while the gate waited
    assert journal.reads[:2] == [0.0, 3.0]
    assert cancelled == [3.0]  # cancelled as the call starts, not a poll later
