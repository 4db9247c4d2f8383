"""Source limits (``concurrency``): hard caps per tool across the whole run."""

from __future__ import annotations

from typing import Callable

import trio


class RateLimiter:
    """At most ``per_second`` starts per second, evenly spaced (a leaky bucket of size 1)."""

    def __init__(self, per_second: float):
        self.interval = 1.0 / per_second
        self._next = -float("inf")
        self._lock = trio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            now = trio.current_time()
            wait = self._next - now
            if wait > 0:
                await trio.sleep(wait)
                now = trio.current_time()
            self._next = max(now, self._next) + self.interval


class ToolLimits:
    """Per-tool limiters, made on first use."""

    def __init__(self) -> None:
        self._in_flight: dict[tuple[str, str], trio.CapacityLimiter] = {}
        self._rate: dict[tuple[str, str], RateLimiter] = {}

    def in_flight(self, key: tuple[str, str], limit: int) -> trio.CapacityLimiter:
        lim = self._in_flight.get(key)
        if lim is None:
            lim = self._in_flight[key] = trio.CapacityLimiter(limit)
        return lim

    def rate(self, key: tuple[str, str], per_second: float) -> RateLimiter:
        lim = self._rate.get(key)
        if lim is None:
            lim = self._rate[key] = RateLimiter(per_second)
        return lim


class LentDeadline:
    """A lane worker's cancel scope, lent to the attempt it runs as that attempt's deadline.

    Entering and leaving a trio cancel scope with a deadline costs more than a no-op call itself;
    a lane worker already has a scope (halts and signals cancel it), so its attempts borrow that
    one: ``at`` is the running attempt's deadline (inf between attempts) and the run's
    ``Watchdog`` cancels the scope when it passes, setting ``fired``. The worker then leaves its
    scope, settles the attempt as timed out outside it and opens a fresh one for what follows.
    """

    __slots__ = ("scope", "at", "fired", "watchdog", "now")

    def __init__(self, watchdog: Watchdog):
        self.watchdog = watchdog
        self.scope: trio.CancelScope | None = None
        self.at = float("inf")
        self.fired = False
        #: the run's clock (``trio.current_time`` without its two calls of indirection)
        self.now: Callable[[], float] = trio.current_time
        watchdog.lents.append(self)

    def lend(self, scope: trio.CancelScope) -> None:
        """The worker's scope from now on (a fresh one after a timeout or a halt)."""
        self.scope, self.at, self.fired = scope, float("inf"), False
        self.now = trio.lowlevel.current_clock().current_time

    def start(self, deadline: float) -> None:
        """An attempt runs until ``deadline``; set ``at`` back to inf when it returns."""
        self.at = deadline
        watchdog = self.watchdog
        if deadline < watchdog.wake:
            watchdog.wake = deadline
            if watchdog.scope is not None:
                watchdog.scope.deadline = deadline


class Watchdog:
    """One task per run that cancels the scope of each attempt whose deadline passed. It sleeps
    until the earliest deadline it knows of; an attempt that ends first leaves it a stale wake-up,
    after which it sleeps until the earliest deadline still running."""

    def __init__(self) -> None:
        self.lents: list[LentDeadline] = []
        self.wake = float("inf")
        self.scope: trio.CancelScope | None = None

    async def run(self) -> None:
        while True:
            with trio.CancelScope(deadline=self.wake) as self.scope:
                await trio.sleep_forever()
            now = trio.current_time()
            wake = float("inf")
            for lent in self.lents:
                if lent.at <= now:
                    lent.at, lent.fired = float("inf"), True
                    if lent.scope is not None:
                        lent.scope.cancel()
                elif lent.at < wake:
                    wake = lent.at
            self.wake = wake
